// Command svcproxy stands in for a Kubernetes Service in front of deputy's
// replicas (package deputy.dev/deputy/test/framework/svcproxy): new
// connections go to replicas whose /readyz answers 200, round robin; open
// connections stay where they are. It runs until SIGINT or SIGTERM and then
// prints one JSON line with what each backend received. Usage:
//
//	svcproxy -listen 127.0.0.1:9443 -backends 127.0.0.1:9444,127.0.0.1:9445 -cacert ca.crt [-probe-period 200ms]
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"deputy.dev/deputy/test/framework/svcproxy"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9443", "address to listen on")
	backends := flag.String("backends", "", "comma-separated replica addresses, host:port")
	caFile := flag.String("cacert", "", "CA bundle that verifies the replicas' serving certificates (for the /readyz probes)")
	period := flag.Duration("probe-period", 200*time.Millisecond, "time between two /readyz probes of a replica")
	flag.Parse()
	if err := run(*listen, *backends, *caFile, *period); err != nil {
		fmt.Fprintln(os.Stderr, "svcproxy:", err)
		os.Exit(1)
	}
}

func run(listen, backends, caFile string, period time.Duration) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	p, err := svcproxy.Start(svcproxy.Options{Listen: listen, Backends: strings.Split(backends, ","),
		TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ProbePeriod: period})
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	stats, refused := p.Stats(), p.Refused()
	_ = p.Close()
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"backends": stats, "refused": refused})
}
