package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Provider kinds the outbound model clients speak.
const (
	providerOpenAI    = "openai"            // OpenAI chat completions
	providerAnthropic = "anthropic"         // Anthropic messages
	providerCompat    = "openai-compatible" // any OpenAI-compatible server (Ollama, vLLM, llama.cpp)
)

// modelProvider is the resolved model-provider credential.
type modelProvider struct {
	Kind    string // providerOpenAI, providerAnthropic or providerCompat
	APIKey  string
	BaseURL string // empty: the vendor's default
	Model   string // SVC_MODEL, default model id
}

// env returns the provider as the environment variables injected into
// agents and workflows.
func (p *modelProvider) env() map[string]string {
	m := map[string]string{}
	switch p.Kind {
	case providerOpenAI:
		m["OPENAI_API_KEY"] = p.APIKey
		if p.BaseURL != "" {
			m["OPENAI_BASE_URL"] = p.BaseURL
		}
	case providerAnthropic:
		m["ANTHROPIC_API_KEY"] = p.APIKey
		if p.BaseURL != "" {
			m["ANTHROPIC_BASE_URL"] = p.BaseURL
		}
	case providerCompat:
		m["SVC_MODEL_BASE_URL"] = p.BaseURL
		if p.APIKey != "" {
			m["SVC_MODEL_API_KEY"] = p.APIKey
		}
	}
	if p.Model != "" {
		m["SVC_MODEL"] = p.Model
	}
	return m
}

// chatMessage is one message of a conversation, independent of the wire
// that carried it and of the provider that answers it.
type chatMessage struct {
	Role       string     `json:"role"` // "user", "assistant" or "tool"
	Content    string     `json:"content,omitempty"`
	ToolCalls  []toolCall `json:"toolCalls,omitempty"`  // assistant: tools it calls
	ToolCallID string     `json:"toolCallId,omitempty"` // tool: the call it answers
	ToolName   string     `json:"toolName,omitempty"`   // tool: the tool's name
	IsError    bool       `json:"isError,omitempty"`    // tool: the result is an error
}

// toolCall is a model's request to call a tool.
type toolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"` // a JSON object
}

// toolSpec describes a tool offered to the model.
type toolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"` // JSON Schema of the arguments
}

// modelRequest is one call to a model.
type modelRequest struct {
	Model       string
	System      string
	Messages    []chatMessage
	Tools       []toolSpec
	MaxTokens   int          // 0: provider default
	Temperature *float64     // nil: provider default
	TopP        *float64     // nil: provider default
	Stop        []string     // stop sequences; nil: none
	Format      *modelFormat // nil: free text
}

// Types of a modelFormat.
const (
	formatJSONObject = "json_object" // any JSON object
	formatJSONSchema = "json_schema" // JSON matching Schema
)

// modelFormat is the shape the agent's reply must take, as a wire asked
// for it (Responses text.format, chat completions response_format,
// Anthropic output_format): passed to the model and checked on the reply.
type modelFormat struct {
	Type        string          // formatJSONObject or formatJSONSchema
	Name        string          // json_schema: its name
	Description string          // json_schema: what the reply is
	Strict      *bool           // json_schema: the client's strict, passed on
	Schema      json.RawMessage // json_schema: the JSON Schema
	Param       string          // the request parameter that asked for it, for errors
	compiled    *jsonSchema     // Schema, compiled by newModelFormat
}

// errReplyFormat is the failure of a reply that does not take the format
// the client asked for.
var errReplyFormat = errors.New("the model's reply does not take the requested format")

// newModelFormat checks a format a wire decoded: a json_schema format
// needs a schema this runtime can compile.
func newModelFormat(f modelFormat) (*modelFormat, error) {
	switch f.Type {
	case formatJSONObject:
		return &f, nil
	case formatJSONSchema:
		if len(f.Schema) == 0 || string(f.Schema) == "null" {
			return nil, errors.New("a json_schema format needs its schema")
		}
		var root struct {
			Type any `json:"type"`
		}
		if json.Unmarshal(f.Schema, &root) != nil || root.Type != "object" {
			return nil, errors.New(`the schema's root must be an object schema ("type": "object"), as the providers require`)
		}
		c, err := compileSchema(f.Schema)
		if err != nil {
			return nil, err
		}
		f.compiled = c
		return &f, nil
	}
	return nil, fmt.Errorf("unsupported format type %q: use text, json_object or json_schema", f.Type)
}

// check reports whether text takes the format: a JSON object, matching
// the schema when there is one.
func (f *modelFormat) check(text string) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &obj); err != nil || obj == nil {
		return fmt.Errorf("%w (%s): the reply is not a JSON object: %.200q", errReplyFormat, f.Param, text)
	}
	if f.compiled == nil {
		return nil
	}
	violations, err := f.compiled.validateJSON([]byte(text))
	if err != nil {
		return fmt.Errorf("%w (%s): %v", errReplyFormat, f.Param, err)
	}
	if len(violations) > 0 {
		var parts []string
		for _, v := range violations {
			parts = append(parts, orRoot(v.Path)+": "+v.Message)
		}
		return fmt.Errorf("%w (%s): the reply does not match the schema: %s", errReplyFormat, f.Param, strings.Join(parts, "; "))
	}
	return nil
}

// modelUsage counts tokens of one call.
type modelUsage struct {
	InputTokens  int `json:"inputTokens"`
	OutputTokens int `json:"outputTokens"`
}

// Stop reasons of a modelResponse.
const (
	stopEnd       = "stop"       // the model finished its answer
	stopToolCalls = "tool_calls" // the model wants tools called
	stopLength    = "length"     // the token limit cut the answer
)

// modelResponse is a model's complete answer to one call.
type modelResponse struct {
	Model      string
	Text       string
	ToolCalls  []toolCall
	StopReason string // stopEnd, stopToolCalls or stopLength
	Usage      modelUsage
}

// modelDelta is a piece of a streamed answer.
type modelDelta struct {
	Text string
}

// modelClient calls a model provider. onDelta, when non-nil, receives text
// as it streams; the complete response is returned at the end.
type modelClient interface {
	complete(ctx context.Context, req modelRequest, onDelta func(modelDelta)) (modelResponse, error)
}

// upstreamError is a failure reported by the model provider (after
// retries), surfaced to the caller in the caller's wire shape.
type upstreamError struct {
	Provider string // providerOpenAI, providerAnthropic or providerCompat
	Status   int    // HTTP status from the provider; 0 when it was unreachable
	Type     string // the provider's error type, when it gave one
	Message  string
}

func (e *upstreamError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("model provider %s unreachable: %s", e.Provider, e.Message)
	}
	return fmt.Sprintf("model provider %s answered %d: %s", e.Provider, e.Status, e.Message)
}
