module github.com/redlock-go/redlock/rueidis

go 1.25.0

replace github.com/redlock-go/redlock => ../

require (
	github.com/gomodule/redigo v1.9.3
	github.com/redis/rueidis v1.0.79
	github.com/redlock-go/redlock v0.1.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
