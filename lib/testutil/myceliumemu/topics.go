package myceliumemu

import (
	"net/netip"
	"slices"
	"sort"
)

// topicConfig is a node's topic rules, as Mycelium keeps them: a default
// action for topics that are not configured, and a whitelist of topics, each
// with the subnets allowed to send on it and an optional forward socket.
// Whitelist lookups compare the whole topic.
type topicConfig struct {
	accept bool
	list   map[string]*topicEntry
}

type topicEntry struct {
	sources []netip.Prefix
	forward *string
}

func newTopicConfig() topicConfig {
	return topicConfig{accept: true, list: map[string]*topicEntry{}}
}

// accepts reports whether a message on topic from src gets in.
func (tc *topicConfig) accepts(topic []byte, src netip.Addr) bool {
	e, ok := tc.list[string(topic)]
	if !ok {
		return tc.accept
	}
	return slices.ContainsFunc(e.sources, func(p netip.Prefix) bool { return p.Contains(src) })
}

func (tc *topicConfig) entry(topic []byte) *topicEntry {
	e, ok := tc.list[string(topic)]
	if !ok {
		e = &topicEntry{}
		tc.list[string(topic)] = e
	}
	return e
}

// parseSource reads a source as Mycelium does: a CIDR subnet, or a bare
// address meaning a /128 (/32 for IPv4).
func parseSource(s string) (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	return netip.Prefix{}, false
}

// sortedTopics returns keys in a stable order.
func sortedTopics(m map[string]*topicEntry) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
