package config

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// nameKeysInYAMLError rewrites the decoder's "line N: ..." messages so that
// each names the key path it is about ("provider.timeout (line 2): ...").
// The decoder reports only lines, so on a line with several keys (flow
// style) the key is found by the value or field name the message quotes.
func nameKeysInYAMLError(data []byte, err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil {
		return msg
	}
	type entry struct{ path, key, value string }
	byLine := map[int][]entry{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := keyPath(path, k.Value)
				val := ""
				if v.Kind == yaml.ScalarNode {
					val = v.Value
				}
				byLine[k.Line] = append(byLine[k.Line], entry{p, k.Value, val})
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, itemPath(path, i))
			}
		}
	}
	walk(&root, "")
	pick := func(line int, text string) (string, bool) {
		es := byLine[line]
		for _, e := range es {
			if e.value != "" && strings.Contains(text, "`"+e.value+"`") {
				return e.path, true
			}
			if strings.Contains(text, "field "+e.key+" ") {
				return e.path, true
			}
		}
		if len(es) > 0 {
			return es[len(es)-1].path, true
		}
		return "", false
	}
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		trim := strings.TrimSpace(l)
		var n int
		if _, err := fmt.Sscanf(trim, "line %d:", &n); err != nil {
			continue
		}
		if p, ok := pick(n, trim); ok {
			rest := strings.TrimPrefix(trim, fmt.Sprintf("line %d:", n))
			lines[i] = strings.Replace(l, trim, fmt.Sprintf("%s (line %d):%s", p, n, rest), 1)
		}
	}
	return strings.Join(lines, "\n")
}
