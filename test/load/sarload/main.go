// Command sarload sends SubjectAccessReviews to an HTTPS endpoint from C
// concurrent workers for a duration and prints requests/s and latency
// percentiles as one JSON line. Usage:
//
//	sarload -url https://127.0.0.1:8443/authorize -cacert ca.crt [-cert c.crt -key c.key] -c 32 -d 10s [-h2] [-deny-ratio 0.5]
//
// The request body is a fixed v1 SubjectAccessReview (or -body FILE) that
// the example policy allows (alice lists pods in team-a); with -deny-ratio
// R that share of each worker's requests asks for team-b instead, which the
// example policy does not allow (no opinion, or a denial with default
// decision Deny).
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

const (
	defaultBody = `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"alice","groups":["team-a-devs","system:authenticated"],"resourceAttributes":{"verb":"list","resource":"pods","namespace":"team-a","version":"v1"}}}`
	// deniedBody is defaultBody in a namespace the example policy grants
	// alice nothing in.
	deniedBody = `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"alice","groups":["team-a-devs","system:authenticated"],"resourceAttributes":{"verb":"list","resource":"pods","namespace":"team-b","version":"v1"}}}`
)

// Result is what sarload prints.
type Result struct {
	URL         string  `json:"url"`
	Concurrency int     `json:"concurrency"`
	Seconds     float64 `json:"seconds"`
	Requests    int64   `json:"requests"`
	// Sent counts every answered request, warm-up included (for the
	// server's CPU time per request).
	Sent      int64   `json:"sent"`
	Errors    int64   `json:"errors"`
	DenyRatio float64 `json:"deny_ratio"`
	RPS       float64 `json:"rps"`
	P50us     float64 `json:"p50_us"`
	P90us     float64 `json:"p90_us"`
	P99us     float64 `json:"p99_us"`
	HTTP2     bool    `json:"http2"`
}

func main() {
	url := flag.String("url", "", "endpoint URL")
	caFile := flag.String("cacert", "", "CA bundle of the server")
	certFile := flag.String("cert", "", "client certificate")
	keyFile := flag.String("key", "", "client key")
	conc := flag.Int("c", 32, "concurrent workers")
	dur := flag.Duration("d", 10*time.Second, "duration")
	warm := flag.Duration("warmup", 2*time.Second, "warm-up before measuring")
	h2 := flag.Bool("h2", false, "use HTTP/2 (one connection, like client-go) instead of HTTP/1.1 keep-alive connections")
	bodyFile := flag.String("body", "", "request body file (default: a v1 SAR)")
	denyRatio := flag.Float64("deny-ratio", 0, "share of requests, in [0, 1], that the example policy does not allow (team-b instead of team-a); not with -body")
	flag.Parse()
	if *denyRatio < 0 || *denyRatio > 1 || (*denyRatio > 0 && *bodyFile != "") {
		fmt.Fprintln(os.Stderr, "sarload: -deny-ratio must be in [0, 1] and cannot be combined with -body")
		os.Exit(2)
	}

	res, err := run(*url, *caFile, *certFile, *keyFile, *bodyFile, *conc, *dur, *warm, *h2, *denyRatio)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sarload:", err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
}

func run(url, caFile, certFile, keyFile, bodyFile string, conc int, dur, warm time.Duration, h2 bool, denyRatio float64) (*Result, error) {
	body, denied := []byte(defaultBody), []byte(deniedBody)
	// Of every 100 requests of a worker, the first deny100 are denied ones.
	deny100 := int(denyRatio*100 + 0.5)
	if bodyFile != "" {
		b, err := os.ReadFile(bodyFile)
		if err != nil {
			return nil, err
		}
		body = b
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	tlsCfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		tlsCfg.Certificates = []tls.Certificate{c}
	}
	var rt http.RoundTripper
	if h2 {
		rt = &http2.Transport{TLSClientConfig: tlsCfg}
	} else {
		rt = &http.Transport{TLSClientConfig: tlsCfg, MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc, ForceAttemptHTTP2: false,
			TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
	}
	client := &http.Client{Transport: rt, Timeout: 10 * time.Second}

	var (
		measuring atomic.Bool
		stop      atomic.Bool
		reqs      atomic.Int64
		sent      atomic.Int64
		errs      atomic.Int64
		mu        sync.Mutex
		lat       []time.Duration
		wg        sync.WaitGroup
	)
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 1<<16)
			for n := 0; !stop.Load(); n++ {
				b := body
				if n%100 < deny100 {
					b = denied
				}
				start := time.Now()
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				ok := err == nil
				if ok {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					ok = resp.StatusCode == http.StatusOK
				}
				if ok {
					sent.Add(1)
				}
				if measuring.Load() {
					if ok {
						reqs.Add(1)
						local = append(local, time.Since(start))
					} else {
						errs.Add(1)
					}
				}
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	time.Sleep(warm)
	measuring.Store(true)
	start := time.Now()
	time.Sleep(dur)
	measuring.Store(false)
	elapsed := time.Since(start)
	stop.Store(true)
	wg.Wait()

	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[int(float64(len(lat)-1)*p)].Microseconds())
	}
	return &Result{URL: url, Concurrency: conc, Seconds: elapsed.Seconds(), Requests: reqs.Load(), Sent: sent.Load(), Errors: errs.Load(),
		DenyRatio: denyRatio, RPS: float64(reqs.Load()) / elapsed.Seconds(), P50us: pct(0.50), P90us: pct(0.90), P99us: pct(0.99), HTTP2: h2}, nil
}
