// Command etcd is etcd's own server, built from the Go module proxy for StreamStack's tests of
// leases and failover: `go install` refuses etcd's module because its go.mod has `replace`
// directives, so this wrapper module depends on the server package and calls its entry point.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
