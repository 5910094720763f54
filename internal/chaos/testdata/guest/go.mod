module github.com/sandflow/sandflow/internal/chaos/testdata/guest

go 1.26.8

require github.com/sandflow/sandflow/guest-sdk v0.0.0

require github.com/sandflow/sandflow/abi v0.0.0 // indirect
