package config

// Hidden reports whether the policy keeps its numbers and name out of
// every answer (spec.visibility Hidden): it denies, and its denial says
// when to come back, nothing more.
func (p *Policy) Hidden() bool { return p.Spec.IsHidden() }

// Soft reports whether the policy is a warning threshold (spec.soft): it
// marks the requests over it, and never denies.
func (p *Policy) Soft() bool { return p.Spec.IsSoft() }

// enforcing reports whether the policy may deny: neither shadow nor soft.
func (p *Policy) enforcing() bool { return !p.Shadow && !p.Soft() }
