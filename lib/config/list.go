package config

import "strings"

// Entries splits a flag's list at sep and returns its entries trimmed of spaces,
// the empty ones left out: "a=1; ;b=2" with ";" is ["a=1", "b=2"].
func Entries(s, sep string) []string {
	var out []string
	for _, e := range strings.Split(s, sep) {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}
