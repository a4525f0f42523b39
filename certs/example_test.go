package certs_test

import (
	"fmt"
	"os"
	"path/filepath"

	"deputy.dev/deputy/certs"
)

// Init is idempotent: the second run keeps every file.
func ExampleInit() {
	tmp, err := os.MkdirTemp("", "deputy-certs")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "certs")

	for range 2 {
		res, err := certs.Init(dir, certs.InitOptions{Hosts: []string{"deputy.deputy-system.svc", "127.0.0.1"}})
		if err != nil {
			panic(err)
		}
		for _, f := range res.Files {
			fmt.Println(f.Action, f.Name)
		}
	}
	// Output:
	// created ca.crt
	// created ca.key
	// created tls.crt
	// created tls.key
	// created kube-apiserver-client.crt
	// created kube-apiserver-client.key
	// kept ca.crt
	// kept ca.key
	// kept tls.crt
	// kept tls.key
	// kept kube-apiserver-client.crt
	// kept kube-apiserver-client.key
}
