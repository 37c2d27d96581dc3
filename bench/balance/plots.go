package main

import (
	"fmt"
	"path/filepath"

	"github.com/fuge-project/fuge/internal/plot"
)

// policyColor gives each policy one color in every plot.
func policyColor(p string) int {
	switch p {
	case "off":
		return 7
	case "seeds":
		return 1
	case "fit":
		return 0
	}
	return 4
}

// plots writes one PNG per Zipf parameter: max/mean over time, one line per
// policy (PRS Figure 10 as a line plot). It returns their paths.
func (res *result) plots(dir string) ([]string, error) {
	var paths []string
	for _, z := range zipfsOf(res.Runs) {
		var ss []plot.Series
		var xs []string
		for _, r := range res.Runs {
			if r.Zipf != z {
				continue
			}
			ss = append(ss, plot.Series{Name: "policy " + r.Policy, Y: r.MaxMean, Color: policyColor(r.Policy)})
			if len(xs) == 0 {
				for i, s := range r.Seconds {
					label := ""
					if i == 0 || int(s)%30 == 0 {
						label = fmt.Sprintf("%.0f", s)
					}
					xs = append(xs, label)
				}
			}
		}
		c := plot.Lines(fmt.Sprintf("max/mean owner load, zipf %g, load shift halfway", z), "seconds", "max/mean", xs, ss)
		p := filepath.Join(dir, fmt.Sprintf("balance-zipf%g.png", z))
		if err := c.Save(p); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}
