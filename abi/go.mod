module github.com/sandflow/sandflow/abi

go 1.26.8
