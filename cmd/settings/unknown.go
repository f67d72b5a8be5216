package settings

import (
	"fmt"
	"strings"

	"github.com/cfgd/cfgd/deploy/config"
)

// Unknown is a variable that looks like a cfgd setting (its section is one
// cfgd reads) but is none: most often a typo that would otherwise leave a
// default in use without a word.
type Unknown struct {
	Name string
	// Nearest is the known setting it most likely means, or "".
	Nearest string
}

func (u Unknown) String() string {
	if u.Nearest != "" {
		return fmt.Sprintf("%s is not a cfgd setting; did you mean %s?", u.Name, u.Nearest)
	}
	return fmt.Sprintf("%s is not a cfgd setting (see `cfgd config` or docs/settings.md)", u.Name)
}

// Error makes an Unknown an error for CFGD_STRICT=1 and `cfgd check`.
func (u Unknown) Error() string { return u.String() }

// maxTypo is the largest edit distance a suggestion may have: a
// transposition or two wrong letters, not another setting.
const maxTypo = 3

// FindUnknown lists the variables of src under a known section
// (POSTGRES__…, HTTP__…) that are not in Table, each with the nearest
// known name. Variables of other programs (PATH, HOME, anything without a
// known section) are not cfgd's business.
func FindUnknown(src *config.Source) []Unknown {
	var known []string
	isKnown := map[string]bool{}
	sections := map[string]bool{}
	for _, s := range Table() {
		for _, v := range s.Settings {
			known = append(known, v.Name)
			isKnown[v.Name] = true
			if sec, _, ok := strings.Cut(v.Name, "__"); ok {
				sections[sec] = true
			}
		}
	}
	var out []Unknown
	for _, name := range src.Names() {
		sec, _, ok := strings.Cut(name, "__")
		if !ok || isKnown[name] || !sections[strings.ToUpper(sec)] {
			continue
		}
		u := Unknown{Name: name}
		best := maxTypo + 1
		for _, k := range known {
			if d := distance(strings.ToUpper(name), k); d < best {
				best, u.Nearest = d, k
			}
		}
		out = append(out, u)
	}
	return out
}

// distance is the optimal-string-alignment distance: insertions,
// deletions, substitutions and transpositions of neighbours each cost 1,
// so ULR is one step from URL.
func distance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// BuiltInURLs names the connection settings left at their built-in
// defaults (the local stack's Postgres, ClickHouse and Redis, the embedded
// broker), so that start-up can say so once: a typo in one of them would
// otherwise send a migration to the wrong database without a word.
func BuiltInURLs(r *config.Reader) []string {
	var out []string
	for _, name := range []string{"POSTGRES__URL", "CLICKHOUSE__URL", "REDIS__URL", "KAFKA__BROKERS"} {
		if !r.Has(name) {
			out = append(out, name)
		}
	}
	return out
}
