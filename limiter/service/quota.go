package service

// QuotaOverReason is the reason of a request denied because every quota
// it matched is over.
const QuotaOverReason = "every quota_mode limit of the request is over its quota"

// quotaOver decides a request that matched quotas (compiled.Behaviours
// Quota: envoyproxy/ratelimit's quota_mode limits, as ERL decides them
// after #1059): it is over its limit when every one of them is over (one
// under its quota lets it through; other policies decide as always). A
// descriptor's vote is its reported decision's policy. Quotas are shadow
// policies, so that alone none denies; this makes resp a denial when all
// are over, reported with the quota that frees first (a retry then
// passes). A quota that is a DryRun too is never over. With enforcement
// off, the descriptors report no policy and nothing is denied. Only a
// domain with quotas runs it (compiled.Domain.HasQuotas).
func quotaOver(resp *Response) {
	total, over := 0, 0
	var first *Decision
	for i := range resp.Decisions {
		d := &resp.Decisions[i]
		if d.Policy == nil || !d.Policy.Quota {
			continue
		}
		total++
		if d.Result.Allowed || d.Policy.DryRun {
			continue
		}
		over++
		if first == nil || longerWait(first.Result.RetryAfter, d.Result.RetryAfter) {
			first = d
		}
	}
	if total == 0 || over < total {
		return
	}
	resp.OverLimit = true
	dec := Decision{Policy: first.Policy, Result: first.Result, OverLimit: true, RetryAfter: first.Result.RetryAfter,
		Denied: first.Policy, Reason: QuotaOverReason}
	resp.Reported.merge(&dec)
}
