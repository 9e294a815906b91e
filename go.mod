module github.com/rackcache/rackcache

go 1.24.0
