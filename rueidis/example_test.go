package rueidis_test

import (
	"log"

	"github.com/redis/rueidis"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/node"
	rueidisnode "github.com/redlock-go/redlock/rueidis"
)

// Three independent servers, each through a rueidis client.
func Example() {
	var nodes []node.Node
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"} {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			log.Fatal(err)
		}
		defer rc.Close()
		n, err := rueidisnode.New(rc)
		if err != nil {
			log.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	client, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
}
