// Command etcd is etcd's own server main, built from go.etcd.io/etcd/server/v3 so
// the e2e suite needs no download: `go build -o bin/etcd ./tools/etcd`.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
