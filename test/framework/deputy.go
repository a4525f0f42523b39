package framework

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// CLI runs the deputy binary with args and returns its combined output.
func CLI(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("deputy %v: %w\n%s", args, err, out)
	}
	return string(out), nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Deputy is a running `deputy serve` process.
type Deputy struct {
	Bin     string
	CertDir string
	Port    int
	URL     string // https://127.0.0.1:PORT

	cmd  *exec.Cmd
	logs *syncBuffer
	done chan error
}

// DeputyOptions configure StartDeputy.
type DeputyOptions struct {
	Bin string
	// CertDir holds certificates made by `deputy certs init` (created if empty).
	CertDir string
	// Port to listen on; 0 picks a free one.
	Port int
	// Args are extra `deputy serve` arguments (e.g. --policy DIR).
	Args []string
	// Env are extra environment variables (NAME=value) on top of the test's.
	Env []string
}

// StartDeputy starts `deputy serve --listen 127.0.0.1:PORT --cert-dir DIR
// ARGS...` and waits until /healthz answers.
func StartDeputy(opts DeputyOptions) (*Deputy, error) {
	if opts.Port == 0 {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		opts.Port = p
	}
	d := &Deputy{Bin: opts.Bin, CertDir: opts.CertDir, Port: opts.Port, URL: "https://127.0.0.1:" + strconv.Itoa(opts.Port),
		logs: &syncBuffer{}, done: make(chan error, 1)}
	args := append([]string{"serve", "--listen", "127.0.0.1:" + strconv.Itoa(opts.Port), "--cert-dir", opts.CertDir, "--log-level", "debug"}, opts.Args...)
	d.cmd = exec.Command(opts.Bin, args...)
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	if len(opts.Env) > 0 {
		d.cmd.Env = append(os.Environ(), opts.Env...)
	}
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("failed to start deputy: %w", err)
	}
	go func() { d.done <- d.cmd.Wait() }()

	client, err := d.Client(false)
	if err != nil {
		_ = d.Stop()
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-d.done:
			return nil, fmt.Errorf("deputy exited: %v\n%s", err, d.Logs())
		default:
		}
		resp, err := client.Get(d.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d, nil
			}
		}
		if time.Now().After(deadline) {
			_ = d.Stop()
			return nil, fmt.Errorf("deputy did not become healthy: %v\n%s", err, d.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Client returns an HTTPS client trusting deputy's CA, presenting
// kube-apiserver's client certificate when withClientCert is true.
func (d *Deputy) Client(withClientCert bool) (*http.Client, error) {
	caPEM, err := os.ReadFile(filepath.Join(d.CertDir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if withClientCert {
		cert, err := tls.LoadX509KeyPair(filepath.Join(d.CertDir, "kube-apiserver-client.crt"), filepath.Join(d.CertDir, "kube-apiserver-client.key"))
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}}, nil
}

// Logs returns everything deputy wrote so far.
func (d *Deputy) Logs() string { return d.logs.String() }

// PID is deputy's process ID (for PeakRSS).
func (d *Deputy) PID() int { return d.cmd.Process.Pid }

// Exited reports whether deputy's process has ended.
func (d *Deputy) Exited() bool {
	select {
	case err := <-d.done:
		d.done <- err
		return true
	default:
		return false
	}
}

// Signal sends sig to deputy.
func (d *Deputy) Signal(sig os.Signal) error { return d.cmd.Process.Signal(sig) }

// Wait waits for deputy to exit, up to timeout.
func (d *Deputy) Wait(timeout time.Duration) error {
	select {
	case err := <-d.done:
		d.done <- err
		return err
	case <-time.After(timeout):
		return fmt.Errorf("deputy did not exit within %s", timeout)
	}
}

// Stop sends SIGTERM and waits up to 30s, then kills.
func (d *Deputy) Stop() error {
	if d.cmd.Process == nil {
		return nil
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if err := d.Wait(30 * time.Second); err != nil && d.cmd.ProcessState == nil {
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		return err
	}
	return nil
}

// WaitReady polls /readyz until it answers 200 or ctx ends.
func (d *Deputy) WaitReady(ctx context.Context) error {
	c, err := d.Client(false)
	if err != nil {
		return err
	}
	for {
		resp, err := c.Get(d.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("deputy not ready: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Restart stops deputy and starts it again on the same port and certificate
// directory with args (replacing the previous extra arguments). kube-apiserver
// keeps pointing at the same URL.
func (d *Deputy) Restart(args ...string) (*Deputy, error) {
	if err := d.Stop(); err != nil {
		return nil, fmt.Errorf("stopping deputy for a restart: %w", err)
	}
	return StartDeputy(DeputyOptions{Bin: d.Bin, CertDir: d.CertDir, Port: d.Port, Args: args})
}
