// librbd and librados ship no pkg-config files on Debian; link them by name
// (packages librbd-dev and librados-dev, installed by hack/deps.sh).
fn main() {
    println!("cargo:rustc-link-lib=rbd");
    println!("cargo:rustc-link-lib=rados");
}
