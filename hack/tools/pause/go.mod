// The pause image's program; a module of its own (no dependencies) that
// hack/images.sh builds statically.
module github.com/rackcache/rackcache/hack/tools/pause

go 1.24.0
