package redisfleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// A Redis data loss (the engine assigned slots whose every node is gone)
// happens in one pass, but must not be reported for one pass only: it is
// recorded in status.redis.dataLoss and dataLossTime, which later passes
// carry over (history, like lastActions), and the RedisDataLoss condition is
// True until a person acknowledges the loss with
// v1beta1.AnnotationDataLossAcknowledged. The pass that finds it also
// records a Warning Event, logs at error level and counts it in
// sluice_operator_redis_data_loss_total.

// maxDataLoss bounds status.redis.dataLoss (its CRD MaxLength).
const maxDataLoss = 1024

// RecordDataLoss carries the last data loss over from prev into st, and adds
// what this pass found (rs, nil when the engine did not run), newest first:
// appended to a loss nobody acknowledged yet, else replacing it.
func RecordDataLoss(fleet *v1beta1.LimiterFleet, prev, st *v1beta1.RedisStatus, rs *Scope) {
	if prev != nil {
		st.DataLoss, st.DataLossTime = prev.DataLoss, prev.DataLossTime
	}
	if rs == nil || rs.Result.DataLoss == "" || strings.Contains(st.DataLoss, rs.Result.DataLoss) {
		return
	}
	loss := rs.Result.DataLoss
	if st.DataLoss != "" && !dataLossAcknowledged(fleet, st) {
		loss += "; " + st.DataLoss
	}
	st.DataLoss = truncate(loss, maxDataLoss)
	st.DataLossTime = &metav1.Time{Time: rs.Now.Truncate(time.Second)}
}

// dataLossAcknowledged reports whether the fleet's annotation acknowledges
// the loss recorded in st.
func dataLossAcknowledged(fleet *v1beta1.LimiterFleet, st *v1beta1.RedisStatus) bool {
	ack, ok := dataLossAck(fleet)
	return ok && st != nil && st.DataLossTime != nil && !ack.Before(st.DataLossTime.Time)
}

// dataLossAck is the time the annotation acknowledges up to.
func dataLossAck(fleet *v1beta1.LimiterFleet) (time.Time, bool) {
	v, ok := fleet.Annotations[v1beta1.AnnotationDataLossAcknowledged]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(v))
	return t, err == nil
}

// SetDataLossCondition sets RedisDataLoss from status.redis for a Cluster
// fleet, and removes it from others.
func SetDataLossCondition(fleet *v1beta1.LimiterFleet) {
	st := &fleet.Status
	if fleet.Spec.EffectiveStoreType() != v1beta1.StoreCluster {
		meta.RemoveStatusCondition(&st.Conditions, v1beta1.RedisDataLossCondition)
		return
	}
	c := metav1.Condition{Type: v1beta1.RedisDataLossCondition, ObservedGeneration: fleet.Generation, Status: metav1.ConditionFalse,
		Reason: v1beta1.NoDataLossReason, Message: "no slot of the Redis Cluster has lost its keys"}
	r := st.Redis
	switch {
	case r == nil || r.DataLoss == "" || r.DataLossTime == nil:
	case dataLossAcknowledged(fleet, r):
		c.Reason = v1beta1.DataLossAcknowledgedReason
		c.Message = fmt.Sprintf("acknowledged (%s=%s): at %s, %s", v1beta1.AnnotationDataLossAcknowledged,
			fleet.Annotations[v1beta1.AnnotationDataLossAcknowledged], r.DataLossTime.UTC().Format(time.RFC3339), r.DataLoss)
	default:
		at := r.DataLossTime.UTC().Format(time.RFC3339)
		c.Status, c.Reason = metav1.ConditionTrue, v1beta1.DataLostReason
		c.Message = truncate(fmt.Sprintf("at %s, %s. The limiters' counters in those slots started again from zero. "+
			"Acknowledge with: kubectl annotate limiterfleet -n %s %s %s=%s --overwrite",
			at, r.DataLoss, fleet.Namespace, fleet.Name, v1beta1.AnnotationDataLossAcknowledged, at), 32768)
		if v, ok := fleet.Annotations[v1beta1.AnnotationDataLossAcknowledged]; ok {
			if _, valid := dataLossAck(fleet); !valid {
				c.Message += fmt.Sprintf(" (the annotation's value %q is not an RFC 3339 time)", v)
			}
		}
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// reportDataLoss tells people about the data loss a pass found: a Warning
// Event on the fleet, an error-level log line and the counter.
func (r *Provisioner) reportDataLoss(ctx context.Context, fleet *v1beta1.LimiterFleet, loss string) {
	key := client.ObjectKeyFromObject(fleet)
	redisDataLoss.WithLabelValues(key.String()).Inc()
	logf.FromContext(ctx).Error(errors.New(loss), "Redis Cluster lost data: the limiters' counters in these slots start again from zero",
		"fleet", key, "acknowledge", "annotate the fleet with "+v1beta1.AnnotationDataLossAcknowledged+"=<status.redis.dataLossTime>")
	if r.Recorder != nil {
		r.Recorder.Event(fleet, corev1.EventTypeWarning, "RedisDataLoss", truncate(loss, 1024))
	}
}

// DataLossAckChanged passes fleet updates that change the acknowledgement
// annotation, which no generation change announces.
var DataLossAckChanged = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetAnnotations()[v1beta1.AnnotationDataLossAcknowledged] != e.ObjectNew.GetAnnotations()[v1beta1.AnnotationDataLossAcknowledged]
	},
}
