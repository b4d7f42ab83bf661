package bench

import "fmt"

// TargetScaleRatio bounds create-to-Ready and delete-to-gone at scale
// against the naive build's, as TargetRatio does at 1,000 Roles.
const TargetScaleRatio = TargetRatio

// ScaleRows are the figures of a run at scale, each with the naive
// build's from the same run (or the Roles' own, for the records' size) and
// its target where one is set.
func ScaleRows(s Scale) []Row {
	on, off := s.On, s.Naive
	what := fmt.Sprintf("%d Roles in %d namespaces", s.Roles(), s.Namespaces)
	ready, gone := ratio(on.Ready.Seconds(), off.Ready.Seconds()), ratio(on.Gone.Seconds(), off.Gone.Seconds())
	rows := []Row{
		row("%s created, to all Ready\t%s\t%s (naive build)\t%.2f×\t≤ %.2f×\t%s",
			what, secs(on.Ready), secs(off.Ready), ready, TargetScaleRatio, yes(ready <= TargetScaleRatio)),
		row("%s deleted, to all gone\t%s\t%s (naive build)\t%.2f×\t≤ %.2f×\t%s",
			what, secs(on.Gone), secs(off.Gone), gone, TargetScaleRatio, yes(gone <= TargetScaleRatio)),
		row("operator peak RSS at %d Roles (VmHWM of its process)\t%s\t%s (naive build)\t%.2f×\t-\t-",
			s.Roles(), mib(on.PeakRSS), mib(off.PeakRSS), ratio(float64(on.PeakRSS), float64(off.PeakRSS))),
		row("cleanup records in etcd, %d Roles all Ready\t%d ConfigMaps\t%d (naive build)\t%+d\t1 a Role (%d)\t%s",
			s.Roles(), on.Records, off.Records, on.Records-off.Records, s.Roles(), yes(on.Records == s.Roles())),
		row("bytes of those records as served (JSON)\t%s (%.0f B a record)\t%s (the Roles themselves)\t%.2f×\t-\t-",
			mib(on.RecordBytes), perItem(on.RecordBytes, on.Records), mib(on.RoleBytes), ratio(float64(on.RecordBytes), float64(on.RoleBytes))),
	}
	for _, r := range []struct {
		name    string
		on, off float64
	}{
		{"API server LIST requests, create to gone", on.Load.Requests["LIST"], off.Load.Requests["LIST"]},
		{"watches open on the API server, all Ready", on.Watches, off.Watches},
		{"API server watch events sent, create to gone", on.Load.WatchEvents, off.Load.WatchEvents},
		{"API server GET requests, create to gone", on.Load.Requests["GET"], off.Load.Requests["GET"]},
		{"API server writes (POST, PUT, PATCH, DELETE), create to gone", on.Load.Writes(), off.Load.Writes()},
	} {
		rows = append(rows, row("%s, %s\t%.0f\t%.0f (naive build)\t%.2f×\t-\t-", r.name, what, r.on, r.off, ratio(r.on, r.off)))
	}
	return rows
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func perItem(bytes int64, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(bytes) / float64(n)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
