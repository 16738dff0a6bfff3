package config

// Hidden reports whether the policy keeps its numbers and name out of
// every answer (spec.visibility Hidden): it denies, and its denial says
// when to come back, nothing more.
func (p *Policy) Hidden() bool { return p.Spec.IsHidden() }
