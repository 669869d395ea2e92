package main

// The request parameters of the chat wires that svc does not decode into
// the turn, and what it does with each: a parameter is honoured, passed to
// the agent's model, or refused with a 400 naming it, never dropped in
// silence. Each wire decodes what it honours or passes (wires.go,
// wire_responses.go); the rules here refuse what it cannot serve, allowing
// only the values that ask for what svc does anyway (tool_choice "auto":
// the agent decides). docs/agents.md's parameter table lists both.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
)

// wireParamRule is how a wire treats one top-level request parameter it
// does not otherwise decode: present and not null, it must be one of
// allowed (JSON texts, compacted), else the request is refused with why.
type wireParamRule struct {
	name    string
	allowed []string // nil: any value is refused
	why     string
}

// The rules of each wire: sampling controls the agent's model is not
// given, and features svc does not have.
var (
	wireParamsChat = []wireParamRule{
		{"tool_choice", []string{`"auto"`}, `the agent decides which tools to call: send "auto" or leave it out`},
		{"parallel_tool_calls", []string{`true`}, "the agent runs every tool call its model makes"},
		{"n", []string{`1`}, "an agent gives one reply per turn"},
		{"seed", nil, "seeds are not passed to the agent's model"},
		{"presence_penalty", []string{`0`}, "penalties are not passed to the agent's model"},
		{"frequency_penalty", []string{`0`}, "penalties are not passed to the agent's model"},
		{"logit_bias", []string{`{}`}, "logit biases are not passed to the agent's model"},
		{"logprobs", []string{`false`}, "the agent's replies carry no log probabilities"},
		{"top_logprobs", []string{`0`}, "the agent's replies carry no log probabilities"},
		{"reasoning_effort", nil, "the agent's model and its reasoning are the agent's definition"},
		{"verbosity", nil, "the agent's model is the agent's definition"},
		{"service_tier", []string{`"auto"`, `"default"`}, "svc has one service tier"},
		{"store", []string{`false`}, "chat completions are not kept: use x-svc-session for a durable session"},
		{"metadata", []string{`{}`}, "chat completions are not kept, so there is nothing to attach metadata to"},
		{"modalities", []string{`["text"]`}, "agents answer in text"},
		{"audio", nil, "agents answer in text"},
		{"prediction", nil, "predicted outputs are not passed to the agent's model"},
		{"web_search_options", nil, "the agent's tools are its definition: svc has no hosted web search"},
		{"functions", nil, "send tools instead (the deprecated functions are not read)"},
		{"function_call", nil, "send tools instead (the deprecated function_call is not read)"},
	}
	wireParamsResponses = []wireParamRule{
		{"tool_choice", []string{`"auto"`}, `the agent decides which tools to call: send "auto" or leave it out`},
		{"parallel_tool_calls", []string{`true`}, "the agent runs every tool call its model makes"},
		{"truncation", []string{`"disabled"`}, "svc does not truncate a conversation"},
		{"reasoning", []string{`{}`}, "the agent's model and its reasoning are the agent's definition"},
		{"include", []string{`[]`}, "svc produces no reasoning items, logprobs or hosted-tool sources to include"},
		{"service_tier", []string{`"auto"`, `"default"`}, "svc has one service tier"},
		{"top_logprobs", []string{`0`}, "the agent's replies carry no log probabilities"},
		{"max_tool_calls", nil, "the agent's maxTurns bounds its tool calls"},
		{"prompt", nil, "prompt templates are not served: the agent's instructions are its definition"},
		{"prompt_cache_retention", nil, "prompt caching is the agent's model's own"},
		{"context_management", nil, "svc does not compact a conversation"},
	}
	wireParamsAGUI = []wireParamRule{
		{"state", []string{`{}`}, "svc's agents keep no shared state with the UI: send {} (the conversation is the thread)"},
	}
	wireParamsAnthropic = []wireParamRule{
		{"tool_choice", []string{`{"type":"auto"}`}, `the agent decides which tools to call: send {"type":"auto"} or leave it out`},
		{"top_k", nil, "top_k is not passed to the agent's model"},
		{"thinking", []string{`{"type":"disabled"}`}, "the agent's model and its reasoning are the agent's definition"},
		{"service_tier", []string{`"auto"`}, "svc has one service tier"},
		{"container", nil, "svc runs no code-execution container"},
		{"mcp_servers", nil, "the agent's tools are its definition: svc calls no MCP server"},
	}
)

// wireCheckParams refuses the first parameter of body that rules refuse.
func wireCheckParams(body []byte, rules []wireParamRule) *wireError {
	if !wireMayHaveParam(body, rules) {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return nil // the wire's own decoding reports it
	}
	for _, r := range rules {
		raw, ok := m[r.name]
		if !ok || string(raw) == "null" {
			continue
		}
		var b bytes.Buffer
		if json.Compact(&b, raw) == nil && slices.Contains(r.allowed, b.String()) {
			continue
		}
		return &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Param: r.name,
			Message: fmt.Sprintf("%s is not supported: %s", r.name, r.why)}
	}
	return nil
}

// wireMayHaveParam reports whether body may hold a parameter of rules:
// one of its strings is a rule's name, or has a \u escape (the only escape
// that spells a letter or an underscore, all a name is made of). Most
// requests have neither, and are spared decoding the body a second time,
// into a map. One pass over body: its strings are where its keys are.
func wireMayHaveParam(body []byte, rules []wireParamRule) bool {
	for i := 0; i < len(body); i++ {
		if body[i] != '"' {
			continue
		}
		start, escaped := i+1, false
		for i++; i < len(body) && body[i] != '"'; i++ {
			if body[i] == '\\' {
				if i+1 < len(body) && body[i+1] == 'u' {
					return true
				}
				escaped = true
				i++ // the escaped character, which may be a quote
			}
		}
		if escaped {
			continue // \n, \" and the like spell no name
		}
		for _, r := range rules {
			if string(body[start:min(i, len(body))]) == r.name {
				return true
			}
		}
	}
	return false
}
