module github.com/sandflow/sandflow/guest-sdk

go 1.26.8

require github.com/sandflow/sandflow v0.0.0

replace github.com/sandflow/sandflow => ../
