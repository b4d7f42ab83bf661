package check

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText writes the report as a person reads it at a glance: one table
// row per experiment, then each broken run's reproduction.
func (r Report) WriteText(w io.Writer) error {
	mode := "default"
	if r.Quick {
		mode = "quick"
	}
	runs, kills := r.Runs()
	fmt.Fprintf(w, "finale check: %s", r.Operator)
	if r.File != "" {
		fmt.Fprintf(w, " (%s)", r.File)
	}
	fmt.Fprintf(w, ", seed %d, %s mode: %d runs, %d kills in %s (setup %s), %.1f runs a minute\n\n",
		r.Seed, mode, runs, kills, r.Elapsed, r.Setup, r.RunsPerMinute())
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EXPERIMENT\tVERDICT\tRUNS\tTIME\tDELETION\tLEAKED\tDUPLICATES\tLOST\tKILLS")
	for _, e := range r.Experiments {
		if e.Verdict == Skipped {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\n", e.Name, e.Verdict)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\n", e.Name, strings.ToUpper(string(e.Verdict)), len(e.Runs),
			e.Elapsed, finishCell(e), e.Leaked(), e.Duplicates(), e.Lost(), e.Kills())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, e := range r.Experiments {
		switch {
		case e.Verdict == Skipped:
			fmt.Fprintf(w, "skipped %s: %s\n", e.Name, e.Reason)
		case e.Reason != "":
			fmt.Fprintf(w, "%s: %s\n", e.Name, e.Reason)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, e := range r.Experiments {
		for _, run := range e.Runs {
			if run.Verdict == Broke {
				fmt.Fprintln(w)
				writeBrokenText(w, e, run)
			}
		}
	}
	fmt.Fprintln(w)
	if b := r.Broken(); len(b) > 0 {
		_, err := fmt.Fprintf(w, "BROKE: %s\n", strings.Join(b, ", "))
		return err
	}
	_, err := fmt.Fprintln(w, "every experiment held")
	return err
}

// finishCell is the slowest deletion, or "not finished".
func finishCell(e Result) string {
	for _, run := range e.Runs {
		if run.Finish == 0 {
			return notFinished
		}
	}
	return Duration(e.MaxFinish()).String()
}

// notFinished stands where a deletion's time would: a zero Finish is a
// deletion that never ended, not one that took no time.
const notFinished = "NOT FINISHED"

// deletionCell is a run's deletion time for its progress line.
func deletionCell(r RunReport) string {
	if r.Finish == 0 {
		return "deletion " + notFinished
	}
	return "deletion " + r.Finish.String()
}

func writeBrokenText(w io.Writer, e Result, run RunReport) {
	fmt.Fprintf(w, "BROKE %s, seed %d: %s\n", e.Name, run.Seed, e.Description)
	fmt.Fprintf(w, "  reproduce: %s\n", run.Reproduce)
	for _, v := range run.Violations {
		fmt.Fprintf(w, "  violation %s\n", v)
	}
	for _, f := range run.Faults {
		fmt.Fprintf(w, "  fault: %s\n", f)
	}
	if len(run.LeftBehind) > 0 {
		fmt.Fprintln(w, "  left behind:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "    NAMESPACE\tKIND\tNAME\tDELETING FOR\tFINALIZERS")
		for _, o := range run.LeftBehind {
			del := "-"
			if o.Deleting > 0 {
				del = Duration(time.Duration(o.Deleting).Round(time.Second)).String()
			}
			fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\t%s\n", namespaceCell(o), o.Kind, o.Name, del, strings.Join(o.Finalizers, ","))
		}
		_ = tw.Flush()
	}
	for _, c := range run.Conditions {
		fmt.Fprintf(w, "  %s\n", c)
	}
	if len(run.Leaked) > 0 {
		fmt.Fprintln(w, "  left in the external service (probe):")
		for _, l := range run.Leaked {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
	if len(run.Lost) > 0 {
		fmt.Fprintf(w, "  results lost (%d produced; these by a child now gone, never persisted by its owner):\n", run.Produced)
		for _, l := range run.Lost {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
	for _, n := range run.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	if run.Cause != "" {
		fmt.Fprintf(w, "  cause: %s\n", run.Cause)
	} else {
		fmt.Fprintf(w, "  fix: %s\n", e.Fix)
	}
	fmt.Fprintln(w, "  steps:")
	for _, ev := range run.Timeline {
		fmt.Fprintf(w, "    %8s  %s\n", "+"+ev.At.String(), ev.What)
	}
}

// namespaceCell is an object's namespace, or clusterScoped for an object
// in none.
func namespaceCell(o Object) string {
	if o.Namespace == "" {
		return clusterScoped
	}
	return o.Namespace
}

// clusterScoped stands where a cluster-scoped object's namespace would.
const clusterScoped = "(cluster)"

// WriteJSON writes the report as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteMarkdown writes the report in Markdown: the table, then each broken
// run with its reproduction, what was left and its timeline.
func (r Report) WriteMarkdown(w io.Writer) error {
	runs, kills := r.Runs()
	mode := "default"
	if r.Quick {
		mode = "quick"
	}
	fmt.Fprintf(w, "# finale check: %s\n\n", mdEscape(r.Operator))
	if r.File != "" {
		fmt.Fprintf(w, "Description `%s`, ", r.File)
	}
	fmt.Fprintf(w, "seed %d, %s mode, started %s: %d runs and %d kills in %s (setup %s), %.1f runs a minute.\n\n",
		r.Seed, mode, r.Started.UTC().Format(time.RFC3339), runs, kills, r.Elapsed, r.Setup, r.RunsPerMinute())
	if b := r.Broken(); len(b) > 0 {
		fmt.Fprintf(w, "**Broke: %s.**\n\n", strings.Join(b, ", "))
	} else {
		fmt.Fprintf(w, "**Every experiment held.**\n\n")
	}
	fmt.Fprintln(w, "| experiment | verdict | runs | time | deletion | leaked | duplicates | lost | kills |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, e := range r.Experiments {
		if e.Verdict == Skipped {
			fmt.Fprintf(w, "| %s | skipped: %s | | | | | | | |\n", e.Name, mdEscape(e.Reason))
			continue
		}
		v := string(e.Verdict)
		if e.Verdict == Broke {
			v = "**broke**"
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %d | %d | %d | %d |\n", e.Name, v, len(e.Runs), e.Elapsed, finishCell(e), e.Leaked(), e.Duplicates(), e.Lost(), e.Kills())
	}
	fmt.Fprintln(w)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "- %s\n", mdEscape(n))
	}
	fmt.Fprintln(w, "\n## Experiments")
	for _, e := range r.Experiments {
		fmt.Fprintf(w, "- `%s`: %s. When it breaks: %s.\n", e.Name, mdEscape(e.Description), mdEscape(e.Fix))
	}
	for _, e := range r.Experiments {
		for _, run := range e.Runs {
			if run.Verdict != Broke {
				continue
			}
			fmt.Fprintf(w, "\n## Broke: %s, seed %d\n\n", e.Name, run.Seed)
			fmt.Fprintf(w, "%s.\n\n```sh\n%s\n```\n\n", mdEscape(e.Description), run.Reproduce)
			for _, v := range run.Violations {
				fmt.Fprintf(w, "- **%s**: %s\n", v.Invariant, mdEscape(v.Detail))
			}
			for _, f := range run.Faults {
				fmt.Fprintf(w, "- fault: %s\n", mdEscape(f))
			}
			for _, n := range run.Notes {
				fmt.Fprintf(w, "- note: %s\n", mdEscape(n))
			}
			if run.Cause != "" {
				fmt.Fprintf(w, "- cause: %s\n", mdEscape(run.Cause))
			} else {
				fmt.Fprintf(w, "- fix: %s\n", mdEscape(e.Fix))
			}
			if len(run.LeftBehind) > 0 {
				fmt.Fprintln(w, "\nLeft behind:\n\n| namespace | kind | name | deleting for | finalizers |\n|---|---|---|---|---|")
				for _, o := range run.LeftBehind {
					fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", namespaceCell(o), o.Kind, o.Name, o.Deleting, strings.Join(o.Finalizers, ", "))
				}
			}
			for _, c := range run.Conditions {
				fmt.Fprintf(w, "\n%s\n", mdEscape(c))
			}
			if len(run.Leaked) > 0 {
				fmt.Fprintln(w, "\nLeft in the external service:\n\n```")
				for _, l := range run.Leaked {
					fmt.Fprintln(w, l)
				}
				fmt.Fprintln(w, "```")
			}
			if len(run.Lost) > 0 {
				fmt.Fprintf(w, "\nResults lost (%d produced; these by a child now gone, never persisted by its owner):\n\n```\n", run.Produced)
				for _, l := range run.Lost {
					fmt.Fprintln(w, l)
				}
				fmt.Fprintln(w, "```")
			}
			fmt.Fprintln(w, "\nTimeline:\n\n| at | step |\n|---|---|")
			for _, ev := range run.Timeline {
				fmt.Fprintf(w, "| +%s | %s |\n", ev.At, mdEscape(ev.What))
			}
			if run.OperatorLog != "" {
				fmt.Fprintf(w, "\nThe operator's log, last lines:\n\n```\n%s\n```\n", run.OperatorLog)
			}
		}
	}
	return nil
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

// WriteHTML writes the Markdown report's content as a standalone HTML page
// (a table per section, the timelines as lists).
func (r Report) WriteHTML(w io.Writer) error {
	var md strings.Builder
	if err := r.WriteMarkdown(&md); err != nil {
		return err
	}
	fmt.Fprintf(w, "<!doctype html>\n<meta charset=\"utf-8\">\n<title>finale check: %s</title>\n", html.EscapeString(r.Operator))
	fmt.Fprintln(w, "<style>body{font-family:sans-serif;max-width:70em;margin:2em auto}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}pre{background:#f4f4f4;padding:.5em;overflow:auto}</style>")
	return markdownToHTML(w, md.String())
}

// markdownToHTML renders the subset of Markdown WriteMarkdown emits:
// headings, tables, lists, fenced blocks and paragraphs.
func markdownToHTML(w io.Writer, md string) error {
	lines := strings.Split(md, "\n")
	inTable, inList, inPre := false, false, false
	closeBlocks := func() {
		if inTable {
			fmt.Fprintln(w, "</table>")
			inTable = false
		}
		if inList {
			fmt.Fprintln(w, "</ul>")
			inList = false
		}
	}
	inline := func(s string) string {
		s = html.EscapeString(strings.ReplaceAll(s, "\\|", "|"))
		for _, m := range []struct{ mark, open, close string }{{"**", "<b>", "</b>"}, {"`", "<code>", "</code>"}} {
			for strings.Count(s, m.mark) >= 2 {
				s = strings.Replace(s, m.mark, m.open, 1)
				s = strings.Replace(s, m.mark, m.close, 1)
			}
		}
		return s
	}
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "```"):
			closeBlocks()
			if inPre {
				fmt.Fprintln(w, "</pre>")
			} else {
				fmt.Fprint(w, "<pre>")
			}
			inPre = !inPre
		case inPre:
			fmt.Fprintln(w, html.EscapeString(l))
		case strings.HasPrefix(l, "## "):
			closeBlocks()
			fmt.Fprintf(w, "<h2>%s</h2>\n", inline(l[3:]))
		case strings.HasPrefix(l, "# "):
			closeBlocks()
			fmt.Fprintf(w, "<h1>%s</h1>\n", inline(l[2:]))
		case strings.HasPrefix(l, "|---"):
		case strings.HasPrefix(l, "|"):
			if !inTable {
				closeBlocks()
				fmt.Fprintln(w, "<table>")
				inTable = true
			}
			cells := splitRow(strings.Trim(l, "|"))
			fmt.Fprint(w, "<tr>")
			for _, c := range cells {
				fmt.Fprintf(w, "<td>%s</td>", inline(strings.TrimSpace(c)))
			}
			fmt.Fprintln(w, "</tr>")
		case strings.HasPrefix(l, "- "):
			if !inList {
				closeBlocks()
				fmt.Fprintln(w, "<ul>")
				inList = true
			}
			fmt.Fprintf(w, "<li>%s</li>\n", inline(l[2:]))
		case strings.TrimSpace(l) == "":
			closeBlocks()
		default:
			closeBlocks()
			fmt.Fprintf(w, "<p>%s</p>\n", inline(l))
		}
	}
	closeBlocks()
	return nil
}

// splitRow splits a table row on unescaped pipes.
func splitRow(s string) []string {
	var out []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && s[i+1] == '|' {
			cur.WriteString("\\|")
			i++
			continue
		}
		if s[i] == '|' {
			out = append(out, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteByte(s[i])
	}
	return append(out, cur.String())
}
