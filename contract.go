package main

import (
	"encoding/json"
	"flag"
)

// agentProtocolVersion is the agent protocol this runtime speaks (SPEC §9;
// link requires 15 or newer of a box).
const agentProtocolVersion = 15

// contractFlag describes one flag of a verb in the contract.
type contractFlag struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	Default     string `json:"default"`
	Description string `json:"description"`
}

// contractVerb describes one verb in the contract.
type contractVerb struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Args        string         `json:"args,omitempty"`
	Flags       []contractFlag `json:"flags"`
}

// contractRoute describes one HTTP route in the contract.
type contractRoute struct {
	Method  string `json:"method"`
	Path    string `json:"path"`
	Purpose string `json:"purpose"`
}

// contractPayload builds the contract the CLI advertises (`dev
// --print-contract` and GET /api/contract): verbs and their flags from the
// same definitions the parser uses, the route table the server registers,
// the error/exit-code table and the agent protocol version.
func contractPayload() []byte {
	var vs []contractVerb
	var walk func(prefix string, list []*verb)
	walk = func(prefix string, list []*verb) {
		for _, v := range list {
			name := prefix + v.name
			if v.subverbs != nil {
				walk(name+" ", v.subverbs)
				continue
			}
			cv := contractVerb{Name: name, Description: v.summary, Args: v.usage, Flags: []contractFlag{}}
			v.newFlags().VisitAll(func(f *flag.Flag) {
				typ := "string"
				if isBoolFlag(f) {
					typ = "boolean"
				}
				cv.Flags = append(cv.Flags, contractFlag{Name: "--" + f.Name, Type: typ, Default: f.DefValue, Description: f.Usage})
			})
			vs = append(vs, cv)
		}
	}
	walk("", verbs())
	var global []contractFlag
	for _, n := range sortedKeys(globalFlags) {
		global = append(global, contractFlag{Name: n, Type: "boolean", Default: "false", Description: globalFlags[n]})
	}
	var routes []contractRoute
	for _, r := range append(routeTable(nil), devRoutes(nil)...) {
		routes = append(routes, contractRoute{Method: r.method, Path: r.path, Purpose: r.purpose})
	}
	payload := map[string]any{
		"schema_version":         schemaVersion,
		"name":                   "svc",
		"agent_protocol_version": agentProtocolVersion,
		"verbs":                  vs,
		"global_flags":           global,
		"routes":                 routes,
		"exit_codes":             exitCodes,
		"headers": map[string]string{
			"Authorization":      "Bearer <ACCESS_TOKEN>: credential on the chat wires",
			"x-api-key":          "<API_KEY>: alternative credential on the chat wires",
			"x-svc-session":      "durable server-side session key",
			"x-svc-conversation": "grouping-only conversation key",
		},
		"envelope": map[string]string{
			"ok":    `{"ok":true,"data":<payload>}`,
			"error": `{"ok":false,"error":{"code":"…","message":"…"}}`,
		},
	}
	b, err := json.Marshal(payload)
	if err != nil {
		panic(err) // the payload is built from static tables; failure is a programming error
	}
	return append(b, '\n')
}
