// A module of its own so that go-containerregistry (and its go 1.25 line)
// never enters the project's go.mod; hack/images.sh builds it.
module github.com/rackcache/rackcache/hack/tools/ociimage

go 1.25.0

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
)
