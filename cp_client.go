package main

// The CLI's client of the control plane's JSON API (cp_server.go).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// cpClientTimeout bounds one call to the control plane.
const cpClientTimeout = 30 * time.Second

// cpClient calls one control plane, with a credential when it has one.
type cpClient struct {
	url        string // base URL, no trailing slash
	credential string
	http       *http.Client
}

// newCPClient returns a client of the control plane at baseURL.
func newCPClient(baseURL, credential string) *cpClient {
	return &cpClient{url: strings.TrimSuffix(baseURL, "/"), credential: credential, http: &http.Client{Timeout: cpClientTimeout}}
}

// cpAPIError is an error answer of the control plane: its status and the
// {"error":{"code","message"}} body.
type cpAPIError struct {
	Status  int
	Code    string
	Message string
}

// Error is the control plane's message with its code.
func (e *cpAPIError) Error() string {
	return fmt.Sprintf("control plane: %s (%s)", e.Message, e.Code)
}

// call sends method path with in as JSON (nil: no body) and decodes a 2xx
// answer into out (nil: discard). An error answer is a *cpAPIError; 401
// becomes the auth error (exit 2), an unreachable control plane a generic
// one naming it.
func (cl *cpClient) call(ctx context.Context, method, path string, in, out any) error {
	var payload []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		payload = b
	}
	var resp *http.Response
	for try := 1; ; try++ {
		var body io.Reader
		if payload != nil {
			body = bytes.NewReader(payload)
		}
		req, err := http.NewRequestWithContext(ctx, method, cl.url+path, body)
		if err != nil {
			return failf(codeGeneric, "check the control plane URL", "control plane %s: %v", cl.url, err)
		}
		req.Header.Set("Content-Type", "application/json")
		if cl.credential != "" {
			req.Header.Set("Authorization", "Bearer "+cl.credential)
		}
		resp, err = cl.http.Do(req)
		if err != nil {
			return &cliError{Code: codeGeneric, Message: fmt.Sprintf("cannot reach the control plane at %s", cl.url), Hint: "is it running? check --control-plane or SVC_CONTROL_PLANE_URL", Err: err}
		}
		wait, ok := cpRetryAfter(resp)
		if !ok || try == cpClientTries {
			break
		}
		// A rate limit that says when to come back, soon: wait and send again.
		resp.Body.Close()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxRequestBody))
	if err != nil {
		return fmt.Errorf("control plane %s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error cpAPIError `json:"error"`
		}
		json.Unmarshal(raw, &e)
		e.Error.Status = resp.StatusCode
		if e.Error.Code == "" {
			e.Error.Code, e.Error.Message = "http_"+fmt.Sprint(resp.StatusCode), strings.TrimSpace(string(raw))
		}
		if resp.StatusCode == http.StatusUnauthorized {
			return &cliError{Code: codeAuth, Message: "not signed in: " + e.Error.Message, Hint: "run `svc login`", Err: &e.Error}
		}
		return &e.Error
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("control plane %s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// cpClientTries bounds the sends of one call that the control plane
// answers 429 with a Retry-After of at most cpClientMaxRetryAfter.
const (
	cpClientTries         = 4
	cpClientMaxRetryAfter = 10 * time.Second
)

// cpRetryAfter reports whether resp is a 429 to retry, and after how long:
// its Retry-After in seconds, at most cpClientMaxRetryAfter.
func cpRetryAfter(resp *http.Response) (time.Duration, bool) {
	if resp.StatusCode != http.StatusTooManyRequests {
		return 0, false
	}
	secs, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After")))
	if err != nil || secs < 0 || time.Duration(secs)*time.Second > cpClientMaxRetryAfter {
		return 0, false
	}
	return max(time.Duration(secs)*time.Second, 100*time.Millisecond), true
}

// cpErrorCode is the control plane's error code of err, or "".
func cpErrorCode(err error) string {
	var e *cpAPIError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// agents lists the agents of organization org (id or slug).
func (cl *cpClient) agents(ctx context.Context, org string) ([]cpAgent, error) {
	var list struct {
		Agents []cpAgent `json:"agents"`
	}
	err := cl.call(ctx, http.MethodGet, "/api/orgs/"+url.PathEscape(org)+"/agents", nil, &list)
	return list.Agents, err
}
