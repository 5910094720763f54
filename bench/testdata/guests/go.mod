module github.com/sandflow/sandflow/bench/testdata/guests

go 1.26.8
