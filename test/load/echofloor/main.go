// Command echofloor is the comparison floor for deputy's /authorize: a minimal
// Go HTTPS server whose handler decodes a SubjectAccessReview with
// encoding/json and writes it back with status.allowed set. Nothing else: no
// routing, metrics, client authentication or policy. Usage:
//
//	echofloor -listen 127.0.0.1:9443 -cert tls.crt -key tls.key
package main

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"log"
	"net/http"

	authorizationv1 "k8s.io/api/authorization/v1"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9443", "HOST:PORT")
	cert := flag.String("cert", "", "serving certificate")
	key := flag.String("key", "", "serving key")
	flag.Parse()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var sar authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sar.Status.Allowed = true
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&sar)
	})
	srv := &http.Server{Addr: *listen, Handler: h, TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}}
	log.Fatal(srv.ListenAndServeTLS(*cert, *key))
}
