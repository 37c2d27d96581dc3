package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/fuge-project/fuge/lease"
	"github.com/fuge-project/fuge/manager"
	"github.com/fuge-project/fuge/ring"
)

// loadFile applies a YAML file: a mapping from the settings' keys to
// values, where namespaces is a list of mappings. A null value leaves the
// setting as it was; unknown and repeated keys are errors, reported with
// the file name and line.
func loadFile(c *Config, table []setting, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil // an empty file sets nothing
	}
	root := resolve(doc.Content[0])
	if isNull(root) {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: want a mapping of settings (key: value lines)", path, root.Line)
	}
	byKey := map[string]*setting{}
	known := []string{"namespaces"}
	for i := range table {
		byKey[table[i].key] = &table[i]
		if table[i].key != "namespaces" {
			known = append(known, table[i].key)
		}
	}
	slices.Sort(known)
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], resolve(root.Content[i+1])
		at := fmt.Sprintf("%s:%d", path, k.Line)
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("%s: a key must be a plain name", at)
		}
		if line, dup := seen[k.Value]; dup {
			return fmt.Errorf("%s: key %q is repeated (first on line %d)", at, k.Value, line)
		}
		seen[k.Value] = k.Line
		s, ok := byKey[k.Value]
		switch {
		case !ok:
			return fmt.Errorf("%s: unknown key %q (known keys: %s)", at, k.Value, strings.Join(known, ", "))
		case isNull(v):
			continue
		case k.Value == "namespaces":
			ns, err := fileNamespaces(path, v)
			if err != nil {
				return err
			}
			c.Server.Namespaces = ns
		case v.Kind != yaml.ScalarNode:
			return fmt.Errorf("%s: %s: want a single value, not a list or mapping", at, k.Value)
		default:
			if err := s.set(c, v.Value); err != nil {
				return fmt.Errorf("%s: %s %q: %w", at, k.Value, v.Value, err)
			}
		}
	}
	return nil
}

// fileNamespaces parses the namespaces list.
func fileNamespaces(path string, seq *yaml.Node) ([]manager.NamespaceConfig, error) {
	if seq.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s:%d: namespaces: want a list of {name, ring_size, header, lease_duration}", path, seq.Line)
	}
	out := []manager.NamespaceConfig{}
	for i, item := range seq.Content {
		item = resolve(item)
		field := fmt.Sprintf("namespaces[%d]", i)
		if item.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s:%d: %s: want a mapping with keys name, ring_size, header, lease_duration", path, item.Line, field)
		}
		ns := manager.NamespaceConfig{RingSize: 4096}
		seen := map[string]bool{}
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, v := item.Content[j], resolve(item.Content[j+1])
			at := fmt.Sprintf("%s:%d: %s.%s", path, k.Line, field, k.Value)
			if seen[k.Value] {
				return nil, fmt.Errorf("%s: key is repeated", at)
			}
			seen[k.Value] = true
			if isNull(v) {
				continue
			}
			if v.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("%s: want a single value", at)
			}
			var err error
			switch k.Value {
			case "name":
				ns.Name = v.Value
			case "ring_size":
				ns.RingSize, err = strconv.Atoi(v.Value)
				if err != nil {
					err = errors.New("not a number")
				}
			case "header":
				ns.Header = v.Value
			case "lease_duration":
				err = duration(&ns.LeaseDuration, v.Value)
			case "balance":
				ns.Balance = v.Value
				if !manager.ValidBalance(v.Value) {
					err = errors.New("not a policy (off, seeds or fit)")
				}
			case "balance_interval":
				err = duration(&ns.BalanceInterval, v.Value)
			case "balance_max_moves":
				ns.BalanceMaxMoves, err = strconv.Atoi(v.Value)
				if err != nil || ns.BalanceMaxMoves < 1 || ns.BalanceMaxMoves > ring.MaxRingSize {
					err = errors.New("not a number from 1 to the ring size")
				}
			case "balance_min_load":
				ns.BalanceMinLoad, err = strconv.ParseFloat(v.Value, 64)
				if err != nil || !(ns.BalanceMinLoad >= 0 && ns.BalanceMinLoad <= lease.MaxLoad) {
					err = errors.New("not a load from 0 to 1e12")
				}
			default:
				err = fmt.Errorf("unknown key (known keys: name, ring_size, header, lease_duration, balance, balance_interval, balance_max_moves, balance_min_load)")
			}
			if err != nil {
				return nil, fmt.Errorf("%s %q: %w", at, v.Value, err)
			}
		}
		if err := checkNamespace(ns); err != nil {
			return nil, fmt.Errorf("%s:%d: %s: %w", path, item.Line, field, err)
		}
		out = append(out, ns)
	}
	return out, nil
}

// resolve follows an alias (*anchor) to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }
