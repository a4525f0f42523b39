package certs

import (
	"strings"
	"testing"
)

func TestCheckServingHost(t *testing.T) {
	dir := t.TempDir()
	if _, err := Init(dir, InitOptions{Hosts: []string{"127.0.0.1", "deputy.example.internal"}}); err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{"127.0.0.1", "deputy.example.internal"} {
		if err := CheckServingHost(dir, ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	err := CheckServingHost(dir, "10.0.0.5")
	if err == nil || !strings.Contains(err.Error(), "--hosts 127.0.0.1,deputy.example.internal,10.0.0.5") && !strings.Contains(err.Error(), "deputy.example.internal,127.0.0.1,10.0.0.5") {
		t.Errorf("err = %v, want the certs init command that adds 10.0.0.5", err)
	}
	if err := CheckServingHost(t.TempDir(), "10.0.0.5"); err != nil {
		t.Errorf("a directory without tls.crt is not checked: %v", err)
	}
}
