package main

import (
	"context"
	"encoding/json"
	"fmt"
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
	MaxTokens   int      // 0: provider default
	Temperature *float64 // nil: provider default
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
