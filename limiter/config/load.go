package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/convert"
	"github.com/sluice-dev/sluice/api/v1beta1"
)

// maxFileSize bounds a policy file; a larger one is rejected, not truncated.
const maxFileSize = 16 << 20

// LoadFile reads a policy file and compiles it into a Snapshot.
func LoadFile(path string) (*Snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%s: larger than %d MiB", path, maxFileSize>>20)
	}
	return Parse(path, data)
}

// Parse reads multi-document YAML (or JSON) of RateLimitPolicy manifests,
// exactly what `kubectl apply -f` takes, validates every document with the
// CRD's rules, and compiles them. Errors name the source, the document and
// the object, and the field. A List of policies is accepted too. So is one
// LimiterFleet, whose spec.enforcement and spec.forwardAuth apply.
func Parse(source string, data []byte) (*Snapshot, error) {
	policies, fleet, err := decode(source, data)
	if err != nil {
		return nil, err
	}
	snap, err := CompileSources(policies)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if fleet != nil {
		if err := applyFleet(snap, &fleet.LimiterFleet, fleet.where); err != nil {
			return nil, err
		}
	}
	return snap, nil
}

// fileFleet is a policy file's LimiterFleet, in v1beta1, and where it is.
type fileFleet struct {
	v1beta1.LimiterFleet
	where string
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

func decode(source string, data []byte) ([]Source, *fileFleet, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []Source
	var fleet *fileFleet
	for doc := 1; ; doc++ {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: document %d: %w", source, doc, err)
		}
		if len(bytes.TrimSpace(stripComments(raw))) == 0 {
			continue
		}
		where := fmt.Sprintf("%s: document %d", source, doc)
		var tm typeMeta
		if err := yaml.Unmarshal(raw, &tm); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", where, err)
		}
		if tm.Kind == "LimiterFleet" {
			f, err := decodeFleet(where, raw)
			if err != nil {
				return nil, nil, err
			}
			if fleet != nil {
				return nil, nil, fmt.Errorf("%s: a second LimiterFleet (%s/%s), after %s (%s/%s): a policy file holds at most one",
					where, f.Namespace, f.Name, fleet.where, fleet.Namespace, fleet.Name)
			}
			fleet = f
			continue
		}
		if tm.Kind == "RateLimitPolicyList" || tm.Kind == "List" {
			var list struct {
				Items []yamlRaw `json:"items"`
			}
			if err := yaml.Unmarshal(raw, &list); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", where, err)
			}
			for i, item := range list.Items {
				p, err := decodePolicy(fmt.Sprintf("%s, item %d", where, i), item)
				if err != nil {
					return nil, nil, err
				}
				out = append(out, p)
			}
			continue
		}
		p, err := decodePolicy(where, raw)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, p)
	}
	return out, fleet, nil
}

// yamlRaw keeps a list item as JSON for a second, strict decode.
type yamlRaw []byte

func (r *yamlRaw) UnmarshalJSON(b []byte) error { *r = append((*r)[:0], b...); return nil }

// decodePolicy decodes a RateLimitPolicy manifest, v1beta1 or v1alpha1
// (converted by the API package, api/convert), defaults and validates it.
func decodePolicy(where string, raw []byte) (Source, error) {
	var p Source
	var tm typeMeta
	if err := yaml.Unmarshal(raw, &tm); err != nil {
		return p, fmt.Errorf("%s: %w", where, err)
	}
	alpha, beta := convert.V1alpha1, v1beta1.GroupVersion.String()
	if tm.Kind != "RateLimitPolicy" || (tm.APIVersion != alpha && tm.APIVersion != beta) {
		return p, fmt.Errorf("%s: got apiVersion %q kind %q, want apiVersion %q or %q kind \"RateLimitPolicy\"", where, tm.APIVersion, tm.Kind, beta, alpha)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return p, fmt.Errorf("%s: %w", where, err)
	}
	if tm.APIVersion == beta {
		err = unmarshalStrict(js, &p.RateLimitPolicy, where, &p.ObjectMeta)
	} else {
		p.RateLimitPolicy, p.Entries, err = convert.DecodePolicy(js)
		err = convertError(err, where, &p.ObjectMeta)
	}
	if err != nil {
		return p, err
	}
	DefaultPolicy(&p.RateLimitPolicy)
	if errs := ValidateSource(&p); len(errs) > 0 {
		return p, fmt.Errorf("%s (%s/%s): %v", where, p.Namespace, p.Name, errs.ToAggregate())
	}
	return p, nil
}

// convertError says where a v1alpha1 manifest failed to decode or convert.
func convertError(err error, where string, meta *metav1.ObjectMeta) error {
	var strict *convert.StrictError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &strict) || meta.Name != "":
		return fmt.Errorf("%s (%s/%s): %w", where, meta.Namespace, meta.Name, err)
	}
	return fmt.Errorf("%s: %w", where, err)
}

// decodeFleet decodes a LimiterFleet manifest strictly, v1beta1 or
// v1alpha1 (converted by api/convert, as the API server serves it);
// applyFleet validates what a policy file takes from it.
func decodeFleet(where string, raw []byte) (*fileFleet, error) {
	f := &fileFleet{where: where}
	var tm typeMeta
	if err := yaml.Unmarshal(raw, &tm); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	alpha, beta := convert.V1alpha1, v1beta1.GroupVersion.String()
	if tm.APIVersion != alpha && tm.APIVersion != beta {
		return nil, fmt.Errorf("%s: got apiVersion %q kind %q, want apiVersion %q or %q", where, tm.APIVersion, tm.Kind, beta, alpha)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if tm.APIVersion == alpha {
		f.LimiterFleet, err = convert.DecodeFleet(js)
		err = convertError(err, where, &f.ObjectMeta)
	} else {
		err = unmarshalStrict(js, &f.LimiterFleet, where, &f.ObjectMeta)
	}
	if err != nil {
		return nil, err
	}
	if f.Namespace == "" {
		f.Namespace = metav1.NamespaceDefault
	}
	return f, nil
}

// unmarshalStrict decodes like the API server: unknown and duplicate
// fields are errors that name the field's path.
func unmarshalStrict(js []byte, obj any, where string, meta *metav1.ObjectMeta) error {
	strict, err := kjson.UnmarshalStrict(js, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if len(strict) > 0 {
		return fmt.Errorf("%s (%s/%s): %w", where, meta.Namespace, meta.Name, errors.Join(strict...))
	}
	return nil
}

// stripComments drops comment-only lines so a document of comments is empty.
func stripComments(b []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' && !bytes.Equal(t, []byte("---")) {
			out = append(out, line...)
			out = append(out, '\n')
		}
	}
	return out
}
