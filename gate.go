package main

import (
	"fmt"
	"net/url"
)

// Boot gate reasons (SPEC §2, DESIGN §5).
const (
	gateProviderEnv    = "model-provider-env"
	gateProviderStored = "model-provider-stored"
	gateFirstRun       = "first-run-completed"
	gateNoProvider     = "no-model-provider"
)

// gateNoProviderMessage is the chat wires' no_model_provider error: the gate
// is open (a run completed earlier) but no provider is configured; it says
// how to add one. consoleURL is the runtime's base URL.
func gateNoProviderMessage(consoleURL string) string {
	return "no model provider is configured, so agents cannot answer: start svc dev with OPENAI_API_KEY or ANTHROPIC_API_KEY " +
		"(or SVC_MODEL_BASE_URL for an OpenAI-compatible server such as Ollama) in its environment, " +
		"or store a credential in the console's settings at " + consoleURL + "/ (no restart needed)"
}

// gateState is the boot gate as reported in the dev payload.
type gateState struct {
	Open   bool   `json:"open"`
	Reason string `json:"reason"`
}

// providerFromEnv resolves a provider from the environment, first match
// wins: OPENAI_API_KEY, ANTHROPIC_API_KEY, SVC_MODEL_BASE_URL. Nil when none.
func providerFromEnv(getenv func(string) string) *modelProvider {
	model := getenv("SVC_MODEL")
	switch {
	case getenv("OPENAI_API_KEY") != "":
		return &modelProvider{Kind: providerOpenAI, APIKey: getenv("OPENAI_API_KEY"), BaseURL: getenv("OPENAI_BASE_URL"), Model: model}
	case getenv("ANTHROPIC_API_KEY") != "":
		return &modelProvider{Kind: providerAnthropic, APIKey: getenv("ANTHROPIC_API_KEY"), BaseURL: getenv("ANTHROPIC_BASE_URL"), Model: model}
	case getenv("SVC_MODEL_BASE_URL") != "":
		return &modelProvider{Kind: providerCompat, APIKey: getenv("SVC_MODEL_API_KEY"), BaseURL: getenv("SVC_MODEL_BASE_URL"), Model: model}
	}
	return nil
}

// storedProvider is the credential stored through the console (JSON body of
// PUT /api/settings/model-provider, and its encrypted form at rest).
type storedProvider struct {
	Provider string `json:"provider"`
	APIKey   string `json:"apiKey"`
	BaseURL  string `json:"baseUrl,omitempty"`
	Model    string `json:"model,omitempty"`
}

// validate checks the stored credential before anything is written.
func (p storedProvider) validate() error {
	switch p.Provider {
	case providerOpenAI, providerAnthropic:
		if p.APIKey == "" {
			return fmt.Errorf("apiKey is required for provider %q", p.Provider)
		}
	case providerCompat:
		if p.BaseURL == "" {
			return fmt.Errorf("baseUrl is required for provider %q", p.Provider)
		}
	default:
		return fmt.Errorf("provider must be %q, %q or %q; got %q", providerOpenAI, providerAnthropic, providerCompat, p.Provider)
	}
	if p.BaseURL != "" {
		u, err := url.Parse(p.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("baseUrl must be an http(s) URL; got %q", p.BaseURL)
		}
	}
	return nil
}

// resolveGate applies the provider resolution order of DESIGN §5: the
// environment, then a stored credential, then a first run completed earlier;
// otherwise the gate is closed.
func resolveGate(fromEnv *modelProvider, stored *storedProvider, firstRunDone bool) (*modelProvider, gateState) {
	switch {
	case fromEnv != nil:
		return fromEnv, gateState{Open: true, Reason: gateProviderEnv}
	case stored != nil:
		return &modelProvider{Kind: stored.Provider, APIKey: stored.APIKey, BaseURL: stored.BaseURL, Model: stored.Model}, gateState{Open: true, Reason: gateProviderStored}
	case firstRunDone:
		return nil, gateState{Open: true, Reason: gateFirstRun}
	}
	return nil, gateState{Open: false, Reason: gateNoProvider}
}
