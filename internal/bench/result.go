package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one figure: what was measured, next to the raw baseline measured
// in the same run, and the goal it is held to. Value, Baseline and Ratio are
// null in JSON when there is nothing honest to put there.
type Result struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
	// Value is the measurement; nil when it could not be measured (Note
	// says why).
	Value *float64 `json:"value"`
	// Baseline is the raw figure this one is compared with, measured in the
	// same run; BaselineName says what it is.
	Baseline     *float64 `json:"baseline"`
	BaselineName string   `json:"baseline_name,omitempty"`
	// Ratio is Value / Baseline.
	Ratio *float64 `json:"ratio"`
	// Goal is the target in words; Met whether this run reached it (nil
	// when the figure has no pass/fail goal or was not measured).
	Goal string `json:"goal"`
	Met  *bool  `json:"met,omitempty"`
	// Note qualifies the figure: its sample, its method, or for a figure
	// not measured, "not measured: <why>".
	Note string `json:"note,omitempty"`
}

// NotMeasured is a figure that could not be measured here, and why.
func NotMeasured(name, unit, goal, why string) Result {
	return Result{Name: name, Unit: unit, Goal: goal, Note: "not measured: " + why}
}

// figure starts a measured Result.
func figure(name, unit string, value float64) Result {
	return Result{Name: name, Unit: unit, Value: &value}
}

// vs sets the baseline and the ratio.
func (r Result) vs(name string, baseline float64) Result {
	r.Baseline, r.BaselineName = &baseline, name
	if r.Value != nil && baseline != 0 && !math.IsNaN(baseline) {
		ratio := *r.Value / baseline
		r.Ratio = &ratio
	}
	return r
}

// goal sets the goal text and whether it was met.
func (r Result) goal(text string, met bool) Result {
	r.Goal, r.Met = text, &met
	return r
}

// info sets a goal that is a description, not a pass/fail check.
func (r Result) info(text string) Result {
	r.Goal = text
	return r
}

func (r Result) note(format string, args ...any) Result {
	r.Note = fmt.Sprintf(format, args...)
	return r
}

// line is the figure on one line, for progress output.
func (r Result) line() string {
	if r.Value == nil {
		return fmt.Sprintf("%s: %s", r.Name, r.Note)
	}
	s := fmt.Sprintf("%s: %s %s", r.Name, num(*r.Value), r.Unit)
	if r.Baseline != nil {
		s += fmt.Sprintf(" (baseline %s", num(*r.Baseline))
		if r.Ratio != nil {
			s += fmt.Sprintf(", ratio %s", num(*r.Ratio))
		}
		s += ")"
	}
	if r.Goal != "" {
		s += " · goal " + r.Goal + metText(r.Met)
	}
	return s
}

func metText(m *bool) string {
	switch {
	case m == nil:
		return ""
	case *m:
		return " · met"
	default:
		return " · NOT met"
	}
}

// num formats a figure with precision that suits its size.
func num(v float64) string {
	a := math.Abs(v)
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return strconv.FormatFloat(v, 'f', -1, 64)
	case a >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

// WriteTable prints results as an aligned table: name, value, unit,
// baseline (and what it is), ratio, goal and whether it was met.
func WriteTable(w io.Writer, results []Result) error {
	// tw keeps the table until Flush, which returns a failed write.
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "FIGURE\tVALUE\tUNIT\tBASELINE (raw, same run)\tRATIO\tGOAL\tMET")
	for _, r := range results {
		value, base, ratio, met := r.Note, "-", "-", "-"
		if r.Value != nil {
			value = num(*r.Value)
		}
		if r.Baseline != nil {
			base = num(*r.Baseline)
			if r.BaselineName != "" {
				base += " (" + r.BaselineName + ")"
			}
		}
		if r.Ratio != nil {
			ratio = num(*r.Ratio)
		}
		if r.Met != nil {
			met = map[bool]string{true: "yes", false: "NO"}[*r.Met]
		}
		goal := r.Goal
		if goal == "" {
			goal = "-"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, value, r.Unit, base, ratio, goal, met)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var notes []string
	for _, r := range results {
		if r.Value != nil && r.Note != "" {
			notes = append(notes, fmt.Sprintf("  %s: %s", r.Name, r.Note))
		}
	}
	if len(notes) > 0 {
		if _, err := fmt.Fprintf(w, "\nnotes:\n%s\n", strings.Join(notes, "\n")); err != nil {
			return err
		}
	}
	return nil
}

// WriteJSON writes results as a JSON array of
// {name, unit, value, baseline, ratio, goal, ...}.
func WriteJSON(w io.Writer, results []Result) error {
	if results == nil {
		results = []Result{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(results)
}

// samples collects durations and reports percentiles in milliseconds.
type samples []time.Duration

// pct returns the p-th percentile (0–100) in ms, nearest rank.
func (s samples) pct(p float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	c := append(samples(nil), s...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	i := int(math.Ceil(p/100*float64(len(c)))) - 1
	i = max(0, min(i, len(c)-1))
	return ms(c[i])
}

// mean returns the mean in ms.
func (s samples) mean() float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return ms(sum) / float64(len(s))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// rate is n events over d, per second.
func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return math.NaN()
	}
	return float64(n) / d.Seconds()
}
