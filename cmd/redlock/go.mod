module github.com/redlock-go/redlock/cmd/redlock

go 1.25.0

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/gomodule/redigo v1.9.3
	github.com/redlock-go/redlock v0.1.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
