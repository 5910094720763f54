module github.com/sandflow/sandflow/guest-sdk

go 1.26.8

require github.com/sandflow/sandflow/abi v0.0.0
