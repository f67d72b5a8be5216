package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// writeCharts draws one PNG per series (time in minutes across), with
// the second half's least-squares line where the series is checked.
func writeCharts(dir string, s *samples) error {
	for i, se := range allSeries {
		var pts plotter.XYs
		for j, t := range s.t {
			if v := s.rows[j][i]; !math.IsNaN(v) {
				pts = append(pts, plotter.XY{X: t / 60, Y: v})
			}
		}
		if len(pts) == 0 {
			continue
		}
		p := plot.New()
		p.Title.Text = se.name + ": " + se.why
		p.X.Label.Text = "minutes"
		p.Y.Label.Text = se.unit
		p.Y.Min = 0
		line, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("chart %s: %w", se.name, err)
		}
		p.Add(line, plotter.NewGrid())
		if se.abs >= 0 {
			if fit := s.fitLine(i); fit != nil {
				fl, err := plotter.NewLine(fit)
				if err != nil {
					return err
				}
				fl.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				p.Add(fl)
				p.Legend.Add("second half, least squares", fl)
				p.Legend.Left = true
			}
		}
		if err := p.Save(8*vg.Inch, 3.5*vg.Inch, filepath.Join(dir, se.name+".png")); err != nil {
			return fmt.Errorf("chart %s: %w", se.name, err)
		}
	}
	return nil
}

// fitLine is the second half's least-squares line, for the chart.
func (s *samples) fitLine(col int) plotter.XYs {
	xs, ys := s.secondHalf(col)
	if len(xs) < 3 {
		return nil
	}
	slope, mx, my := leastSquares(xs, ys)
	if math.IsNaN(slope) {
		return nil
	}
	x0, x1 := xs[0], xs[len(xs)-1]
	return plotter.XYs{{X: x0 / 60, Y: my + slope*(x0-mx)}, {X: x1 / 60, Y: my + slope*(x1-mx)}}
}

// writeSummary writes summary.txt: the rate, each series' second-half
// growth against its tolerance, the sweeps, the load's counts and the
// failures.
func writeSummary(dir string, rate float64, s *samples, sw *sweeps, l *load, fails []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "ingest rate %.0f events/s (batches of %d), %d samples over %.1f min\n", rate, l.batch, len(s.t), last(s.t)/60)
	fmt.Fprintf(&b, "load: %d events acknowledged, %d posts refused, %d failed, %d slots missed; %d probes lost; %d sign-in cycles (%d failed); %d tasks enqueued (%d failed, %d succeeded by the end); %d overview reads failed\n",
		l.acked.Load(), l.refused.Load(), l.failedPosts.Load(), l.missedSlots.Load(), l.probesLost.Load(),
		l.signIns.Load(), l.signInFails.Load(), l.tasks.Load(), l.taskFails.Load(), l.tasksDone, l.statsFails.Load())
	fmt.Fprintf(&b, "whole run: ingest p99 %.0f ms, statistics p99 %.0f ms\n", p99ms(l.allProbes), p99ms(l.allStats))
	for _, line := range sw.summary() {
		fmt.Fprintln(&b, line)
	}
	fmt.Fprintf(&b, "%-30s %12s %12s %12s %12s  %s\n", "series", "first", "last", "2nd-half +", "tolerance", "")
	for i, se := range allSeries {
		growth, median, _ := s.trend(i)
		first, lastV := nan, nan
		if len(s.rows) > 0 {
			first, lastV = s.rows[0][i], s.rows[len(s.rows)-1][i]
		}
		tol, verdict := "shown only", ""
		if se.abs >= 0 {
			t := se.tolerance(median)
			tol = fmt.Sprintf("%.1f", t)
			verdict = "ok"
			if math.IsNaN(growth) || growth > t {
				verdict = "FAIL"
			}
		}
		fmt.Fprintf(&b, "%-30s %12.1f %12.1f %12.1f %12s  %s\n", se.name, first, lastV, growth, tol, verdict)
	}
	if len(fails) == 0 {
		fmt.Fprintln(&b, "PASS")
	}
	for _, f := range fails {
		fmt.Fprintln(&b, "FAIL", f)
	}
	fmt.Print(b.String())
	return os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(b.String()), 0o644)
}

func last(a []float64) float64 {
	if len(a) == 0 {
		return 0
	}
	return a[len(a)-1]
}
