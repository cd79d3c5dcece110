// Package valuesdoc writes a chart's values reference from its values.yaml: every value with its
// default and the comment written above it, which is where the charts describe their values.
package valuesdoc

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Value is one value of a chart: its dotted path, its default as YAML, and its description (the
// comments above it, and the one beside it).
type Value struct {
	Path, Default, Description string
}

// Read returns the values of a values.yaml, in the file's order: each key holding a scalar, a
// list or an empty map, and each map whose keys are not fixed by the chart (none of its values
// has a comment of its own and it is given whole as the default) when it is small.
func Read(data []byte) ([]Value, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("values.yaml is not a map")
	}
	var out []Value
	walk(doc.Content[0], "", "", &out)
	return out, nil
}

// walk appends the values of the map m, whose own path is prefix and description inherited.
func walk(m *yaml.Node, prefix, inherited string, out *[]Value) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		key, val := m.Content[i], m.Content[i+1]
		path := key.Value
		if prefix != "" {
			path = prefix + "." + key.Value
		}
		head := key.HeadComment
		if head == "" && i > 0 {
			// A comment after a blank line below the previous value is the parser's foot
			// comment of that value; it is written above this key.
			head = lastFoot(m.Content[i-1])
		}
		desc := comment(head, key.LineComment, val.LineComment)
		if val.Kind == yaml.MappingNode && len(val.Content) > 0 && commented(val) {
			walk(val, path, desc, out)
			continue
		}
		if desc == "" {
			desc = inherited
			inherited = "" // said once, at the map's first value
		}
		*out = append(*out, Value{Path: path, Default: inline(val), Description: desc})
	}
}

// commented reports whether any key below n has a comment of its own: such a map is described
// value by value, any other given whole.
func commented(n *yaml.Node) bool {
	for i, c := range n.Content {
		if n.Kind == yaml.MappingNode && i%2 == 0 && (c.HeadComment != "" || c.LineComment != "") {
			return true
		}
		if c.LineComment != "" || commented(c) {
			return true
		}
	}
	return false
}

// lastFoot is the foot comment of n or of its last descendant.
func lastFoot(n *yaml.Node) string {
	for {
		if n.FootComment != "" || len(n.Content) == 0 {
			return n.FootComment
		}
		n = n.Content[len(n.Content)-1]
	}
}

// comment joins YAML comments into one line of prose, without the leading #.
func comment(parts ...string) string {
	var words []string
	for _, p := range parts {
		for _, line := range strings.Split(p, "\n") {
			line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
			if line != "" {
				words = append(words, line)
			}
		}
	}
	return strings.Join(words, " ")
}

// inline is a value as one line of flow YAML.
func inline(n *yaml.Node) string {
	c := *n
	c.HeadComment, c.LineComment, c.FootComment = "", "", ""
	if c.Kind == yaml.SequenceNode || c.Kind == yaml.MappingNode {
		c.Style = yaml.FlowStyle
		for _, child := range c.Content {
			child.HeadComment, child.LineComment, child.FootComment = "", "", ""
		}
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&c); err != nil {
		return "?"
	}
	return strings.TrimSpace(b.String())
}

// Write writes the reference of a chart's values as a Markdown section: a table of path,
// default and description.
func Write(w io.Writer, chart string, values []Value) {
	fmt.Fprintf(w, "## %s\n\n| value | default | description |\n| --- | --- | --- |\n", chart)
	for _, v := range values {
		fmt.Fprintf(w, "| `%s` | `%s` | %s |\n", v.Path, cell(v.Default), cell(v.Description))
	}
	fmt.Fprintln(w)
}

// cell escapes what a Markdown table cell cannot hold.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}
