package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestLinkSaysDatabaseUnavailable: a box answering a signed step with 503
// database_unavailable (its PostgreSQL is down) is reported by link as
// such, not as a full replay window or a secret mismatch (issue 36, item
// 14); the box's own answer is checked in TestBoxSurvivesDatabaseRestart.
func TestLinkSaysDatabaseUnavailable(t *testing.T) {
	box := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { boxDatabaseDown(w, r) }))
	defer box.Close()
	c, err := newLinkBoxClient(box.URL, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.do(context.Background(), http.MethodPost, "/.well-known/svc/teach", []byte(`{}`), nil)
	var be *linkBoxError
	if !errors.As(err, &be) || be.Code != linkCodeDatabaseDown || linkHint(be.Code) == "" {
		t.Fatalf("link against a box whose database is down = %v; want %s with a hint", err, linkCodeDatabaseDown)
	}
}
