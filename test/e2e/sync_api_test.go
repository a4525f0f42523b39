package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// deputy's own API (the sync trigger) authenticates callers with deputy's
// token chain or a client certificate and authorizes them with deputy's
// authorizer: anonymous is 401, an authenticated caller without the sync
// permission is 403.
func TestSyncTriggerEndpointAuthenticatesAndAuthorizes(t *testing.T) {
	client, err := deputy.Client(false)
	if err != nil {
		t.Fatal(err)
	}
	url := deputy.URL + "/apis/deputy.dev/v1alpha1/namespaces/guestbook/applications/guestbook/sync"
	post := func(token string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(`{"prune":false}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	t.Run("an anonymous caller gets 401", func(t *testing.T) {
		if code, body := post(""); code != http.StatusUnauthorized {
			t.Errorf("status %d, want 401: %s", code, body)
		}
	})
	t.Run("an unknown token gets 401", func(t *testing.T) {
		if code, body := post("not-a-token"); code != http.StatusUnauthorized {
			t.Errorf("status %d, want 401: %s", code, body)
		}
	})
	t.Run("a caller without the sync permission gets 403 naming the request", func(t *testing.T) {
		code, body := post(carolToken)
		if code != http.StatusForbidden {
			t.Fatalf("status %d, want 403: %s", code, body)
		}
		if !strings.Contains(body, `User \"carol\" cannot create resource \"applications/sync\" in API group \"deputy.dev\"`) {
			t.Errorf("403 body does not name the user and the request: %s", body)
		}
	})
	if strings.Contains(deputy.Logs(), carolToken) {
		t.Error("deputy logged carol's token")
	}
}
