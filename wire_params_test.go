package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestWiresParameters goes through the parameter table of the README: on
// each wire, every parameter svc refuses is a 400 naming it (in the wire's
// own error shape) unless its value asks for what svc does anyway, and the
// sampling parameters passed on reach the agent's model.
func TestWiresParameters(t *testing.T) {
	fake := newFakeProvider(t)
	env := newWiresEnv(t, "")
	env.rt.agents.models = func(p *modelProvider) modelClient { return newModelClient(p, nil) }
	use := func(kind string) {
		base := fake.URL + "/v1"
		if kind == providerAnthropic {
			base = fake.URL
		}
		env.rt.provider.Store(&modelProvider{Kind: kind, APIKey: "sk-test", BaseURL: base})
	}
	use(providerOpenAI)
	wires := []struct {
		name, path string
		rules      []wireParamRule
		body       func(extra map[string]any) string
		param      func(body map[string]any) string // the parameter an error names
	}{
		{"chat", "/openai/v1/chat/completions", wireParamsChat, func(extra map[string]any) string {
			b := map[string]any{"model": "helper", "messages": []map[string]string{{"role": "user", "content": "hi"}}}
			for k, v := range extra {
				b[k] = v
			}
			out, _ := json.Marshal(b)
			return string(out)
		}, func(body map[string]any) string { s, _ := wiresJSONAt(body, "error.param").(string); return s }},
		{"responses", "/openai/v1/responses", wireParamsResponses, func(extra map[string]any) string {
			extra["store"] = false
			return responsesBody("hi", extra)
		}, func(body map[string]any) string { s, _ := wiresJSONAt(body, "error.param").(string); return s }},
		{"anthropic", "/anthropic/v1/messages", wireParamsAnthropic, func(extra map[string]any) string {
			b := map[string]any{"model": "helper", "max_tokens": 50, "messages": []map[string]string{{"role": "user", "content": "hi"}}}
			for k, v := range extra {
				b[k] = v
			}
			out, _ := json.Marshal(b)
			return string(out)
		}, func(body map[string]any) string {
			msg, _ := wiresJSONAt(body, "error.message").(string)
			name, _, _ := strings.Cut(msg, " ")
			return name
		}},
		{"agui", "/agui/helper", wireParamsAGUI, func(extra map[string]any) string {
			b := map[string]any{"threadId": "", "runId": "r1", "messages": []map[string]string{{"id": "m1", "role": "user", "content": "hi"}}, "tools": []any{}, "context": []any{}}
			for k, v := range extra {
				b[k] = v
			}
			out, _ := json.Marshal(b)
			return string(out)
		}, func(body map[string]any) string {
			msg, _ := body["message"].(string)
			name, _, _ := strings.Cut(msg, " ")
			return name
		}},
	}
	for _, w := range wires {
		for _, rule := range w.rules {
			r := env.post(t, w.path, wiresBearer, w.body(map[string]any{rule.name: json.RawMessage(`"something svc cannot do"`)}))
			if r.Status != 400 || w.param(r.json(t)) != rule.name {
				t.Errorf("%s %s: %d %s; want 400 naming it", w.name, rule.name, r.Status, r.Body)
			}
			for _, ok := range rule.allowed {
				if r := env.post(t, w.path, wiresBearer, w.body(map[string]any{rule.name: json.RawMessage(ok)})); r.Status != 200 {
					t.Errorf("%s %s %s: %d %s; want 200 (what svc does anyway)", w.name, rule.name, ok, r.Status, r.Body)
				}
			}
		}
	}
	// A name spelled with JSON escapes is the same parameter: refused too.
	escaped := `{"model":"helper","messages":[{"role":"user","content":"hi"}],"\u0073eed":7}`
	if r := env.post(t, "/openai/v1/chat/completions", wiresBearer, escaped); r.Status != 400 || wires[0].param(r.json(t)) != "seed" {
		t.Errorf("chat \\u0073eed: %d %s; want 400 naming seed", r.Status, r.Body)
	}
	// Tools svc cannot serve are refused, not dropped.
	for name, tt := range map[string]struct{ path, body, want string }{
		"chat hosted tool":      {"/openai/v1/chat/completions", wires[0].body(map[string]any{"tools": []map[string]any{{"type": "custom", "custom": map[string]string{"name": "x"}}}}), "tools[0]"},
		"anthropic server tool": {"/anthropic/v1/messages", wires[2].body(map[string]any{"tools": []map[string]any{{"type": "web_search_20250305", "name": "web_search"}}}), "tools.0"},
	} {
		r := env.post(t, tt.path, wiresBearer, tt.body)
		if r.Status != 400 || !strings.Contains(string(r.Body), tt.want) {
			t.Errorf("%s: %d %s; want 400 naming %s", name, r.Status, r.Body, tt.want)
		}
	}

	// Passed to the agent's model: top_p and stop sequences, on both vendors.
	for _, kind := range []string{providerOpenAI, providerAnthropic} {
		use(kind)
		for _, tt := range []struct{ wire, path, body string }{
			{"chat", "/openai/v1/chat/completions", wires[0].body(map[string]any{"top_p": 0.5, "stop": "END"})},
			{"responses", "/openai/v1/responses", wires[1].body(map[string]any{"top_p": 0.5})},
			{"anthropic", "/anthropic/v1/messages", wires[2].body(map[string]any{"top_p": 0.5, "stop_sequences": []string{"END"}})},
		} {
			if r := env.post(t, tt.path, wiresBearer, tt.body); r.Status != 200 {
				t.Fatalf("%s via %s: %d %s", tt.wire, kind, r.Status, r.Body)
			}
			reqs := fake.requests()
			sent := reqs[len(reqs)-1].Body
			stopField := map[string]string{providerOpenAI: "stop", providerAnthropic: "stop_sequences"}[kind]
			if sent["top_p"] != 0.5 {
				t.Errorf("%s via %s: the model received top_p %v", tt.wire, kind, sent["top_p"])
			}
			if tt.wire != "responses" && fmt.Sprint(sent[stopField]) != "[END]" {
				t.Errorf("%s via %s: the model received %s %v", tt.wire, kind, stopField, sent[stopField])
			}
		}
	}
}
