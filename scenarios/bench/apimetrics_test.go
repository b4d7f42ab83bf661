package bench

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseAPILoad(t *testing.T) {
	for name, tc := range map[string]struct {
		text    string
		want    APILoad
		wantErr bool
	}{
		"requests summed by verb and by verb and resource (a subresource after a slash), watch events summed, open watches counted, others ignored": {
			text: `# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="namespace",subresource="",verb="LIST",version="v1"} 12
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="LIST",version="v1"} 3
apiserver_request_total{code="0",component="apiserver",dry_run="",group="",resource="configmaps",scope="cluster",subresource="",verb="WATCH",version="v1"} 2
apiserver_request_total{code="201",component="apiserver",dry_run="",group="pg.finale.dev",resource="roles",scope="resource",subresource="",verb="POST",version="v1alpha1"} 1e+04
apiserver_request_total{code="200",component="apiserver",dry_run="",group="pg.finale.dev",resource="roles",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 7
apiserver_watch_events_total{group="",resource="configmaps",version="v1"} 40
apiserver_watch_events_total{group="pg.finale.dev",resource="roles",version="v1alpha1"} 2
apiserver_longrunning_requests{component="apiserver",group="",resource="configmaps",scope="cluster",subresource="",verb="WATCH",version="v1"} 3
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="namespace",subresource="log",verb="CONNECT",version="v1"} 1
apiserver_longrunning_requests{component="apiserver",group="pg.finale.dev",resource="roles",scope="cluster",subresource="",verb="WATCH",version="v1alpha1"} 2

apiserver_request_duration_seconds_bucket{verb="LIST",le="0.1"} 99
`,
			want: APILoad{
				Requests:    map[string]float64{"LIST": 15, "WATCH": 2, "POST": 10000, "PATCH": 7},
				ByResource:  map[string]float64{"LIST configmaps": 12, "LIST pods": 3, "WATCH configmaps": 2, "POST roles": 10000, "PATCH roles/status": 7},
				WatchEvents: 42, Watches: 5,
			},
		},
		"escaped quotes and commas in a label value": {
			text: `apiserver_request_total{path="a\"b,c",verb="GET"} 5 1700000000000`,
			want: APILoad{Requests: map[string]float64{"GET": 5}, ByResource: map[string]float64{"GET ": 5}},
		},
		"a sample without labels": {
			text: "apiserver_watch_events_total 7",
			want: APILoad{Requests: map[string]float64{}, ByResource: map[string]float64{}, WatchEvents: 7},
		},
		"unterminated label":   {text: `apiserver_request_total{verb="GET} 5`, wantErr: true},
		"value not a number":   {text: `apiserver_request_total{verb="GET"} x`, wantErr: true},
		"no value":             {text: `apiserver_request_total{verb="GET"}`, wantErr: true},
		"labels without value": {text: `apiserver_request_total{verb} 1`, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ParseAPILoad(tc.text)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseAPILoad: error %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseAPILoad (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAPILoadSub(t *testing.T) {
	after := APILoad{Requests: map[string]float64{"LIST": 10, "WATCH": 4, "POST": 7, "DELETE": 3, "PATCH": 1, "PUT": 2},
		ByResource: map[string]float64{"LIST configmaps": 10}, WatchEvents: 100, Watches: 9}
	before := APILoad{Requests: map[string]float64{"LIST": 4, "WATCH": 4, "POST": 2}, ByResource: map[string]float64{"LIST configmaps": 4}, WatchEvents: 40, Watches: 12}
	d := after.Sub(before)
	want := APILoad{Requests: map[string]float64{"LIST": 6, "WATCH": 0, "POST": 5, "DELETE": 3, "PATCH": 1, "PUT": 2},
		ByResource: map[string]float64{"LIST configmaps": 6}, WatchEvents: 60, Watches: 9}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("Sub (-want +got):\n%s", diff)
	}
	if got := d.Writes(); got != 11 {
		t.Errorf("Writes = %v, want 11", got)
	}
}
