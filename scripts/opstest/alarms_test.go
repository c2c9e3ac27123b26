// Package opstest checks the operations code (template.yaml's alarms and
// dashboard, the fleet stack's scaling) against the metrics the code emits:
// an alarm on a metric nobody writes never fires, and nothing else would
// notice.
package opstest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"avatarsvc/gpu-fleet/worker"
	"avatarsvc/scripts/localstack"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/emf"
	"avatarsvc/shared/reaper"
	"avatarsvc/shared/webhooks"
)

// emitted is what the code writes: namespace -> metric -> the dimension
// sets (name -> value) of the lines that carried it.
type emitted map[string]map[string][]map[string]string

// emitAll runs every EMF writer of the code once with sample values.
func emitAll(t *testing.T) emitted {
	var buf bytes.Buffer
	now := time.Now()
	m := worker.NewMetrics(&buf, emf.RendererNamespace, "sample-group")
	if err := m.Publish(now, 4, 1); err != nil {
		t.Fatal(err)
	}
	if err := m.PublishQuality(now, domain.Quality{Frames: 100}); err != nil {
		t.Fatal(err)
	}
	api := emf.New(&buf, emf.APINamespace)
	if err := reaper.WriteMetrics(api, now, reaper.Result{Ended: map[string]int{domain.ReasonWorkerLost: 1, domain.ReasonExpired: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := webhooks.WriteAttemptMetrics(api, domain.WebhookAttempt{At: now, StatusCode: 500}, true); err != nil {
		t.Fatal(err)
	}

	out := emitted{}
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("an EMF line is not JSON: %v: %s", err, sc.Bytes())
		}
		var meta struct {
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name, Unit string }
			}
		}
		raw, _ := json.Marshal(line["_aws"])
		if err := json.Unmarshal(raw, &meta); err != nil || len(meta.CloudWatchMetrics) == 0 {
			t.Fatalf("an EMF line has no _aws.CloudWatchMetrics: %s", sc.Bytes())
		}
		for _, d := range meta.CloudWatchMetrics {
			if out[d.Namespace] == nil {
				out[d.Namespace] = map[string][]map[string]string{}
			}
			for _, set := range d.Dimensions {
				dims := map[string]string{}
				for _, name := range set {
					v, ok := line[name].(string)
					if !ok {
						t.Errorf("EMF line: dimension %s has no string value: %s", name, sc.Bytes())
					}
					dims[name] = v
				}
				for _, metric := range d.Metrics {
					if _, ok := line[metric.Name]; !ok {
						t.Errorf("EMF line: metric %s has no value: %s", metric.Name, sc.Bytes())
					}
					out[d.Namespace][metric.Name] = append(out[d.Namespace][metric.Name], dims)
				}
			}
		}
	}
	return out
}

// metricRef is a metric a template names: an alarm, a scaling policy's
// metric, or a dashboard widget's.
type metricRef struct {
	where, namespace, name string
	dims                   map[string]yaml.Node // value nodes keep their tag (!Sub, !GetAtt)
}

func loadTemplate(t *testing.T, path string) *yaml.Node {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Content[0]
}

// metricRefs finds every mapping with Namespace and MetricName under the
// template's resources.
func metricRefs(file string, root *yaml.Node) []metricRef {
	var out []metricRef
	var walk func(where string, n *yaml.Node)
	walk = func(where string, n *yaml.Node) {
		if n.Kind == yaml.MappingNode && localstack.MapValue(n, "Namespace") != nil && localstack.MapValue(n, "MetricName") != nil {
			r := metricRef{where: where, namespace: localstack.MapValue(n, "Namespace").Value, name: localstack.MapValue(n, "MetricName").Value, dims: map[string]yaml.Node{}}
			if ds := localstack.MapValue(n, "Dimensions"); ds != nil {
				for _, d := range ds.Content {
					r.dims[localstack.MapValue(d, "Name").Value] = *localstack.MapValue(d, "Value")
				}
			}
			out = append(out, r)
			return
		}
		for _, c := range n.Content {
			walk(where, c)
		}
	}
	res := localstack.MapValue(root, "Resources")
	for i := 0; i+1 < len(res.Content); i += 2 {
		walk(file+" "+res.Content[i].Value, res.Content[i+1])
	}
	return out
}

func resourceType(root *yaml.Node, id string) string {
	if r := localstack.MapValue(localstack.MapValue(root, "Resources"), id); r != nil {
		if ty := localstack.MapValue(r, "Type"); ty != nil {
			return ty.Value
		}
	}
	return ""
}

// awsMetrics are the AWS namespaces' metrics the templates may use, with
// their dimension.
var awsMetrics = map[string]map[string]string{
	"AWS/SQS": {"ApproximateAgeOfOldestMessage": "QueueName", "ApproximateNumberOfMessagesVisible": "QueueName"},
}

func TestAlarmsWatchWhatTheCodeEmits(t *testing.T) {
	root, err := localstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	got := emitAll(t)
	api := loadTemplate(t, filepath.Join(root, "template.yaml"))
	fleet := loadTemplate(t, filepath.Join(root, "infra", "renderer-fleet.yaml"))
	refs := append(metricRefs("template.yaml", api), metricRefs("infra/renderer-fleet.yaml", fleet)...)
	if len(refs) < 7 {
		t.Fatalf("found %d metric references in the templates, want the alarms and the scaling policy", len(refs))
	}
	for _, r := range refs {
		t.Run(r.where, func(t *testing.T) {
			if byName, ok := awsMetrics[r.namespace]; ok {
				dim, ok := byName[r.name]
				if !ok {
					t.Fatalf("%s %s: not a metric this check knows", r.namespace, r.name)
				}
				v, ok := r.dims[dim]
				if len(r.dims) != 1 || !ok {
					t.Fatalf("dimensions: got %v, want %s only", slices.Sorted(maps.Keys(r.dims)), dim)
				}
				// !GetAtt <Queue>.QueueName of a queue of this template.
				id, attr, _ := strings.Cut(v.Value, ".")
				if v.Tag != "!GetAtt" || attr != "QueueName" || resourceType(api, id) != "AWS::SQS::Queue" {
					t.Errorf("QueueName: got %s %s, want !GetAtt <a queue>.QueueName", v.Tag, v.Value)
				}
				return
			}
			sets, ok := got[r.namespace][r.name]
			if !ok {
				t.Fatalf("%s %s: the code emits no such metric (it emits %v)", r.namespace, r.name, metricNames(got))
			}
			matched := false
			for _, set := range sets {
				if !slices.Equal(slices.Sorted(maps.Keys(r.dims)), slices.Sorted(maps.Keys(set))) {
					continue
				}
				matched = true
				for name, v := range r.dims {
					// A literal value must be one the code writes; a
					// reference (the group's name) is resolved at deploy.
					if v.Tag == "!!str" && !strings.Contains(v.Value, "${") && !emitsValue(sets, name, v.Value) {
						matched = false
					}
				}
				if matched {
					break
				}
			}
			if !matched {
				t.Errorf("%s %s: dimensions %v (values %v) match no line the code writes (%v)", r.namespace, r.name, slices.Sorted(maps.Keys(r.dims)), values(r.dims), sets)
			}
		})
	}
	t.Run("every alarm the operators need exists", func(t *testing.T) {
		var have []string
		for _, r := range refs {
			have = append(have, r.namespace+" "+r.name)
		}
		for _, want := range []string{
			"AWS/SQS ApproximateAgeOfOldestMessage", "AWS/SQS ApproximateNumberOfMessagesVisible",
			"avatarsvc/renderer FreeSlots", "avatarsvc/api SessionsEnded", "avatarsvc/api WebhookAttemptFailures",
		} {
			if !slices.Contains(have, want) {
				t.Errorf("no alarm on %s", want)
			}
		}
	})
	t.Run("dashboard", func(t *testing.T) {
		body := localstack.MapValue(localstack.MapValue(localstack.MapValue(localstack.MapValue(api, "Resources"), "Dashboard"), "Properties"), "DashboardBody")
		if body == nil {
			t.Fatal("template.yaml has no Dashboard")
		}
		// ${...} are substituted at deploy; the rest must be JSON.
		text := regexp.MustCompile(`\$\{[^}]+\}`).ReplaceAllString(body.Value, "x")
		var dash struct {
			Widgets []struct {
				Properties struct{ Metrics [][]any }
			}
		}
		if err := json.Unmarshal([]byte(text), &dash); err != nil {
			t.Fatalf("DashboardBody is not JSON: %v", err)
		}
		search := regexp.MustCompile(`\{(avatarsvc/[a-z]+),[^}]*\} MetricName="([A-Za-z0-9]+)"`)
		n := 0
		for _, w := range dash.Widgets {
			for _, m := range w.Properties.Metrics {
				var ns, name string
				if s, ok := m[0].(string); ok && strings.HasPrefix(s, "avatarsvc/") && len(m) > 1 {
					ns, name = s, m[1].(string)
				} else if e, ok := m[0].(map[string]any); ok {
					if sm := search.FindStringSubmatch(e["expression"].(string)); sm != nil {
						ns, name = sm[1], sm[2]
					}
				}
				if ns == "" {
					continue
				}
				n++
				if _, ok := got[ns][name]; !ok {
					t.Errorf("dashboard: %s %s is not emitted", ns, name)
				}
			}
		}
		if n == 0 {
			t.Error("the dashboard shows none of the service's own metrics")
		}
	})
}

func values(m map[string]yaml.Node) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v.Tag+" "+v.Value)
	}
	sort.Strings(out)
	return out
}

func emitsValue(sets []map[string]string, name, value string) bool {
	for _, s := range sets {
		if s[name] == value {
			return true
		}
	}
	return false
}

func metricNames(e emitted) []string {
	var out []string
	for ns, ms := range e {
		for m := range ms {
			out = append(out, ns+" "+m)
		}
	}
	sort.Strings(out)
	return out
}
