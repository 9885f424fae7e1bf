// etcd, the server Kubernetes 1.36 runs (the version k8s.io/kubernetes v1.36.3 pins).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
