package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// wiresFormatSchema is the schema the structured-output tests ask for.
const wiresFormatSchema = `{"type":"object","properties":{"city":{"type":"string"},"temp":{"type":"number"}},"required":["city","temp"],"additionalProperties":false}`

// TestWiresStructuredOutput: a reply format asked on any wire (Responses
// text.format, chat completions response_format, Anthropic output_format /
// output_config.format), json_schema or json_object, reaches the agent's
// model (OpenAI: response_format; Anthropic: a forced reply tool whose
// input schema is the schema), the reply is checked against it (a reply
// that does not match is a 502, never a 200), and Responses echoes the
// format it obeyed. A format svc cannot serve is a 400 naming it.
func TestWiresStructuredOutput(t *testing.T) {
	for _, kind := range []string{providerOpenAI, providerAnthropic} {
		t.Run(kind, func(t *testing.T) {
			fake := newFakeProvider(t)
			env := newWiresEnv(t, "")
			base := fake.URL + "/v1"
			if kind == providerAnthropic {
				base = fake.URL
			}
			env.rt.provider.Store(&modelProvider{Kind: kind, APIKey: "sk-test", BaseURL: base})
			env.rt.agents.models = func(p *modelProvider) modelClient { return newModelClient(p, nil) }
			received := func() map[string]any {
				reqs := fake.requests()
				return reqs[len(reqs)-1].Body
			}
			good := `json {"city":"Oslo","temp":3}`
			schemaFormat := map[string]any{"type": "json_schema", "name": "weather", "strict": true, "schema": json.RawMessage(wiresFormatSchema)}
			for _, tt := range []struct {
				name, path, body, textAt string
			}{
				{"responses", "/openai/v1/responses", responsesBody(good, map[string]any{"store": false, "text": map[string]any{"format": schemaFormat}}), "output.0.content.0.text"},
				{"chat", "/openai/v1/chat/completions", fmt.Sprintf(`{"model":"helper","messages":[{"role":"user","content":%q}],"response_format":{"type":"json_schema","json_schema":{"name":"weather","strict":true,"schema":%s}}}`, good, wiresFormatSchema), "choices.0.message.content"},
				{"anthropic", "/anthropic/v1/messages", fmt.Sprintf(`{"model":"helper","max_tokens":100,"messages":[{"role":"user","content":%q}],"output_config":{"format":{"type":"json_schema","schema":%s}}}`, good, wiresFormatSchema), "content.0.text"},
				{"anthropic beta", "/anthropic/v1/messages", fmt.Sprintf(`{"model":"helper","max_tokens":100,"messages":[{"role":"user","content":%q}],"output_format":{"type":"json_schema","schema":%s}}`, good, wiresFormatSchema), "content.0.text"},
			} {
				r := env.post(t, tt.path, wiresBearer, tt.body)
				if r.Status != 200 {
					t.Fatalf("%s: %d %s", tt.name, r.Status, r.Body)
				}
				body := r.json(t)
				if got := wiresJSONAt(body, tt.textAt); got != `{"city":"Oslo","temp":3}` {
					t.Errorf("%s: reply %v; want the JSON the model gave", tt.name, got)
				}
				sent := received()
				if kind == providerOpenAI {
					if wiresJSONAt(sent, "response_format.type") != "json_schema" || wiresJSONAt(sent, "response_format.json_schema.schema.required.0") != "city" {
						t.Errorf("%s: the model received response_format %v", tt.name, sent["response_format"])
					}
				} else {
					tools, _ := sent["tools"].([]any)
					last := tools[len(tools)-1]
					if wiresJSONAt(last, "name") != providerReplyTool || wiresJSONAt(last, "input_schema.required.0") != "city" || wiresJSONAt(sent, "tool_choice.type") != "any" {
						t.Errorf("%s: the model received tools %v, tool_choice %v", tt.name, tools, sent["tool_choice"])
					}
				}
				if tt.name == "responses" && wiresJSONAt(body, "text.format.name") != "weather" {
					t.Errorf("responses: text %v; want the format it obeyed", body["text"])
				}
			}
			// json_object: any object passes, and the model is told.
			r := env.post(t, "/openai/v1/chat/completions", wiresBearer, `{"model":"helper","messages":[{"role":"user","content":"json {\"a\":1}"}],"response_format":{"type":"json_object"}}`)
			if r.Status != 200 || wiresJSONAt(r.json(t), "choices.0.message.content") != `{"a":1}` {
				t.Errorf("json_object: %d %s", r.Status, r.Body)
			}
			if sent := received(); kind == providerOpenAI && wiresJSONAt(sent, "response_format.type") != "json_object" {
				t.Errorf("json_object: the model received %v", sent["response_format"])
			}
			// A reply that does not take the format is never answered as a success.
			for name, body := range map[string]string{
				"schema mismatch": responsesBody(`json {"city":"Oslo"}`, map[string]any{"store": false, "text": map[string]any{"format": schemaFormat}}),
				"not json":        responsesBody("hello", map[string]any{"store": false, "text": map[string]any{"format": map[string]any{"type": "json_object"}}}),
				"streamed":        responsesBody(`json {"city":1,"temp":2}`, map[string]any{"store": false, "stream": true, "text": map[string]any{"format": schemaFormat}}),
			} {
				if name == "not json" && kind == providerAnthropic {
					continue // the forced reply tool's input is always an object
				}
				r := env.post(t, "/openai/v1/responses", wiresBearer, body)
				if name == "streamed" {
					last := r.Events[len(r.Events)-1]
					if last.Name != "response.failed" || !strings.Contains(last.Data, "text.format") {
						t.Errorf("%s: last event %s %s; want response.failed naming text.format", name, last.Name, last.Data)
					}
					continue
				}
				if msg, _ := wiresJSONAt(r.json(t), "error.message").(string); r.Status != 502 || !strings.Contains(msg, "text.format") {
					t.Errorf("%s: %d %s; want 502 naming text.format", name, r.Status, r.Body)
				}
			}
		})
	}
	// Formats svc cannot serve: 400 naming the parameter.
	env := newWiresEnv(t, "")
	for name, tt := range map[string]struct{ path, body, param string }{
		"responses unknown type": {"/openai/v1/responses", responsesBody("hi", map[string]any{"text": map[string]any{"format": map[string]any{"type": "grammar"}}}), "text.format"},
		"responses no schema":    {"/openai/v1/responses", responsesBody("hi", map[string]any{"text": map[string]any{"format": map[string]any{"type": "json_schema", "name": "x"}}}), "text.format"},
		"responses array root":   {"/openai/v1/responses", responsesBody("hi", map[string]any{"text": map[string]any{"format": map[string]any{"type": "json_schema", "name": "x", "schema": map[string]any{"type": "array"}}}}), "text.format"},
		"chat bad schema":        {"/openai/v1/chat/completions", `{"model":"helper","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":5}}}}}}`, "response_format"},
	} {
		r := env.post(t, tt.path, wiresBearer, tt.body)
		if r.Status != 400 || wiresJSONAt(r.json(t), "error.param") != tt.param {
			t.Errorf("%s: %d %s; want 400 naming %s", name, r.Status, r.Body, tt.param)
		}
	}
	r := env.post(t, "/anthropic/v1/messages", wiresBearer, `{"model":"helper","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"output_format":{"type":"xml"}}`)
	if msg, _ := wiresJSONAt(r.json(t), "error.message").(string); r.Status != 400 || !strings.Contains(msg, "output_format") {
		t.Errorf("anthropic unknown format: %d %s; want 400 naming output_format", r.Status, r.Body)
	}
}
