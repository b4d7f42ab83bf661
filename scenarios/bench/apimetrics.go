package bench

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// APILoad is what the API server counted of its own load, read from its
// /metrics: requests by verb (apiserver_request_total, which counts a
// WATCH only when it ends), watch events sent (apiserver_watch_events_total)
// and the watches open (apiserver_longrunning_requests, a gauge). Every
// client counts: the operator, the controller manager and the bench's own
// creates, deletes and watch, which are the same for both builds.
type APILoad struct {
	Requests    map[string]float64 // by verb: LIST, WATCH, GET, POST, ...
	ByResource  map[string]float64 // by verb and resource: "LIST configmaps", "PATCH roles/status"
	WatchEvents float64
	Watches     float64
}

// Writes is the mutating requests: POST, PUT, PATCH and DELETE.
func (a APILoad) Writes() float64 {
	return a.Requests["POST"] + a.Requests["PUT"] + a.Requests["PATCH"] + a.Requests["DELETE"] + a.Requests["DELETECOLLECTION"]
}

// Sub is a - b, counter by counter; Watches, a gauge, is a's.
func (a APILoad) Sub(b APILoad) APILoad {
	d := APILoad{Requests: map[string]float64{}, ByResource: map[string]float64{}, WatchEvents: a.WatchEvents - b.WatchEvents, Watches: a.Watches}
	for k, v := range a.Requests {
		d.Requests[k] = v - b.Requests[k]
	}
	for k, v := range a.ByResource {
		d.ByResource[k] = v - b.ByResource[k]
	}
	return d
}

// logRequests logs l's requests by verb and resource, the most first.
func (s Stack) logRequests(l APILoad) {
	counts := make(map[string]int, len(l.ByResource))
	for k, v := range l.ByResource {
		counts[k] = int(v)
	}
	s.logf("  API server requests by verb and resource, the most first: %s", perRole(counts, 1))
}

// Metric names read by ParseAPILoad.
const (
	metricRequests    = "apiserver_request_total"
	metricWatchEvents = "apiserver_watch_events_total"
	metricLongRunning = "apiserver_longrunning_requests"
)

// readAPILoad scrapes the API server's /metrics with cfg's credentials.
func readAPILoad(ctx context.Context, cfg *rest.Config) (APILoad, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return APILoad{}, fmt.Errorf("bench: API server metrics: %w", err)
	}
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return APILoad{}, fmt.Errorf("bench: API server metrics: %w", err)
	}
	return ParseAPILoad(string(raw))
}

// ParseAPILoad sums the Prometheus text exposition's request counters by
// their verb label, its watch event counters and its open watches.
func ParseAPILoad(text string) (APILoad, error) {
	l := APILoad{Requests: map[string]float64{}, ByResource: map[string]float64{}}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, labels, value, err := sample(line)
		if err != nil {
			return APILoad{}, err
		}
		switch name {
		case metricRequests:
			l.Requests[labels["verb"]] += value
			key := labels["verb"] + " " + labels["resource"]
			if sub := labels["subresource"]; sub != "" {
				key += "/" + sub
			}
			l.ByResource[key] += value
		case metricWatchEvents:
			l.WatchEvents += value
		case metricLongRunning:
			if labels["verb"] == "WATCH" {
				l.Watches += value
			}
		}
	}
	if err := sc.Err(); err != nil {
		return APILoad{}, fmt.Errorf("bench: API server metrics: %w", err)
	}
	return l, nil
}

// sample splits one line of the text exposition, name{labels} value
// [timestamp], into its parts; an empty line is a sample of no name.
func sample(line string) (name string, labels map[string]string, value float64, err error) {
	line = strings.TrimSpace(line)
	if line == "" {
		return "", nil, 0, nil
	}
	rest := line
	if i := strings.IndexAny(line, "{ "); i < 0 {
		return "", nil, 0, fmt.Errorf("bench: metrics line %q: no value", line)
	} else {
		name, rest = line[:i], line[i:]
	}
	labels = map[string]string{}
	if strings.HasPrefix(rest, "{") {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, ", ")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq < 0 {
				return "", nil, 0, fmt.Errorf("bench: metrics line %q: bad labels", line)
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var b strings.Builder
			closed := false
			for i := 0; i < len(rest); i++ {
				switch c := rest[i]; {
				case c == '\\' && i+1 < len(rest):
					i++
					switch rest[i] {
					case 'n':
						b.WriteByte('\n')
					default:
						b.WriteByte(rest[i])
					}
				case c == '"':
					rest, closed = rest[i+1:], true
				default:
					b.WriteByte(c)
				}
				if closed {
					break
				}
			}
			if !closed {
				return "", nil, 0, fmt.Errorf("bench: metrics line %q: unterminated label value", line)
			}
			labels[key] = b.String()
		}
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", nil, 0, fmt.Errorf("bench: metrics line %q: no value", line)
	}
	value, err = strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", nil, 0, fmt.Errorf("bench: metrics line %q: %w", line, err)
	}
	return name, labels, value, nil
}
