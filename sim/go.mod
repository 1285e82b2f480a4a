module github.com/redlock-go/redlock/sim

go 1.25.0

replace github.com/redlock-go/redlock => ../

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/gomodule/redigo v1.9.3
	github.com/redlock-go/redlock v0.1.0
)

require github.com/yuin/gopher-lua v1.1.1
