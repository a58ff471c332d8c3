package results

import "strconv"

// cacheColumns are the columns of a cell's cache table.
var cacheColumns = []column{
	{Text: "policy", MD: "policy"},
	{Text: "epoch 0 s", MD: "epoch 0 s", Right: true},
	{Text: "epoch s", MD: "steady epoch s", Right: true},
	{Text: "hits", MD: "hits", Right: true},
	{Text: "misses", MD: "misses", Right: true},
	{Text: "refills", MD: "refills", Right: true},
	{Text: "local MB", MD: "MB read locally", Right: true},
	{Text: "wire MB", MD: "MB on the wire", Right: true},
	{Text: "resident MB", MD: "resident MB", Right: true},
	{Text: "resident", MD: "resident samples", Right: true},
}

// cacheTable is a cell's cache rows: each run's first and steady epochs
// with the steady epoch's cache account, for the runs whose compute agents
// had a cache; nil when none had.
func cacheTable(c *Cell) [][]string {
	var rows [][]string
	for i := range c.Runs {
		run := &c.Runs[i]
		e := run.Steady()
		if e == nil || e.Cache == nil {
			continue
		}
		k := e.Cache
		rows = append(rows, []string{rowName(run), f2(run.Epochs[0].Seconds), f2(e.Seconds), strconv.Itoa(k.Hits), strconv.Itoa(k.Misses),
			strconv.Itoa(k.Refills), mb(k.ReadBytes), mb(e.AgentBytes), mb(k.ResidentBytes), strconv.Itoa(k.ResidentSamples)})
	}
	return rows
}
