package service

import "github.com/sluice-dev/sluice/limiter/compiled"

// replace drops from the plan the policies that another policy the
// request matched replaces (compiled.Replacement: Replaces, by Name):
// every match's Replaces count, a replaced or unlimited one's too, so
// that the order of the descriptors does not matter. Only a domain with
// a policy that replaces others runs it (compiled.Domain.HasReplaces). A
// dropped policy is moved past its step's window, so that pl.matches
// still holds every match (checkMatchBudget counts them). The work is the
// matches squared times the names their policies replace, which the
// configuration bounds (an ERL domain matches at most one policy per
// descriptor); it allocates nothing once the plan's pool is warm.
func (pl *plan) replace() {
	n := len(pl.matches)
	pl.drop = append(pl.drop[:0], make([]bool, n)...)
	dropped := false
	for k, p := range pl.matches {
		pl.drop[k] = p.Replacement != nil && p.Replacement.Name != "" && replaced(pl.matches, p.Replacement.Name)
		dropped = dropped || pl.drop[k]
	}
	if !dropped {
		return
	}
	for i := range pl.steps {
		st := &pl.steps[i]
		kept := 0
		for k := range st.matches {
			if !pl.drop[st.from+k] {
				st.matches[kept], st.matches[k] = st.matches[k], st.matches[kept]
				kept++
			}
		}
		st.matches = st.matches[:kept]
	}
}

// replaced reports whether a policy of matches replaces the name.
func replaced(matches []*compiled.Policy, name string) bool {
	for _, q := range matches {
		if q.Replacement == nil {
			continue
		}
		for _, r := range q.Replacement.Replaces {
			if r == name {
				return true
			}
		}
	}
	return false
}
