// Command slowest reads `go test -json` on standard input and prints the
// package's wall time and its slowest top-level tests, for the README's
// table of the suite's time (issue 38, item E):
//
//	go test -count=1 -json ./... > test.json; (cd tools/slowest && go run . -n 20) < test.json
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
)

// event is the part of a test2json event read here.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
}

func main() {
	n := flag.Int("n", 20, "how many tests to print")
	flag.Parse()
	type result struct {
		name    string
		elapsed float64
		action  string
	}
	var tests []result
	packages := map[string]float64{}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		switch {
		case e.Test == "" && (e.Action == "pass" || e.Action == "fail"):
			packages[e.Package] = e.Elapsed
		case e.Test != "" && !strings.Contains(e.Test, "/") && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
			tests = append(tests, result{e.Test, e.Elapsed, e.Action})
		}
	}
	for p, s := range packages {
		fmt.Printf("package %s: %.0f s wall, %d top-level tests\n", p, s, len(tests))
	}
	sort.Slice(tests, func(i, j int) bool { return tests[i].elapsed > tests[j].elapsed })
	fmt.Println("| test | s | |")
	fmt.Println("|---|---:|---|")
	for i, t := range tests {
		if i == *n {
			break
		}
		fmt.Printf("| `%s` | %.1f | %s |\n", t.name, t.elapsed, t.action)
	}
}
