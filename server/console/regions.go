package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/regionsim"
	"github.com/sluicehq/sluice/region"
)

// maxSimulateBody bounds the body of a simulation: 64 regions with long names fit many times.
const maxSimulateBody = 64 << 10

// maxSimulated is the largest limit and total demand, as sluice simulate regions takes them.
const maxSimulated = 1 << 53

// simulateRequest is the body of POST /v1/console/regions/simulate, decoded.
type simulateRequest struct {
	limit   int64
	regions []string // in the order given: demand moves from each to the next
	demand  map[string]int64
	floor   float64
}

// simulationView is the answer: the hour minute by minute, as columns a chart takes as they are.
// Element i of every array is minute i.
type simulationView struct {
	Limit   int64          `json:"limit"`
	Floor   float64        `json:"floor"`
	Every   int            `json:"every"` // minutes between rebalances
	Minutes int            `json:"minutes"`
	Regions []regionView   `json:"regions"`
	Fleet   fleetView      `json:"fleet"`
	Totals  fleetTotalView `json:"totals"`
}

type regionView struct {
	Name             string          `json:"name"`
	Demand           []int64         `json:"demand"`
	Even             []int64         `json:"even"`       // the even share
	Rebalanced       []int64         `json:"rebalanced"` // the share in force that minute
	ServedEven       []int64         `json:"servedEven"`
	ServedRebalanced []int64         `json:"servedRebalanced"`
	Total            regionTotalView `json:"total"`
}

type regionTotalView struct {
	Demand           int64 `json:"demand"`
	Even             int64 `json:"even"`
	Rebalanced       int64 `json:"rebalanced"`
	ServedEven       int64 `json:"servedEven"`
	ServedRebalanced int64 `json:"servedRebalanced"`
}

type fleetView struct {
	Demand           []int64 `json:"demand"`
	Servable         []int64 `json:"servable"` // demand capped at the limit
	ServedEven       []int64 `json:"servedEven"`
	ServedRebalanced []int64 `json:"servedRebalanced"`
}

type fleetTotalView struct {
	Demand           int64 `json:"demand"`
	Servable         int64 `json:"servable"`
	ServedEven       int64 `json:"servedEven"`
	ServedRebalanced int64 `json:"servedRebalanced"`
}

// invalidf is a 400 of the simulation: the body's fault, its message naming the field.
func invalidf(format string, args ...any) error {
	return errors.New("console: " + fmt.Sprintf(format, args...))
}

// simulateRegions replays an hour of demand moving across regions against an even split and
// rebalanced shares, as sluice simulate regions --plot does. It reads nothing but the body and
// changes nothing.
func simulateRegions(w http.ResponseWriter, r *http.Request) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "console: the body must be application/json")
		return
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSimulateBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("console: the body is over %d KiB", maxSimulateBody>>10))
			return
		}
		writeError(w, http.StatusBadRequest, codeInvalid, "console: the body could not be read")
		return
	}
	req, err := decodeSimulate(data)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeInvalid, err.Error())
		return
	}
	sim, err := regionsim.Simulate(regionsim.Config{Limit: req.limit, Regions: req.regions, Demand: req.demand, Floor: req.floor})
	if err != nil {
		// decodeSimulate checks what Simulate does; name the body's field all the same.
		writeError(w, http.StatusBadRequest, codeInvalid, "console: "+simulateField(err))
		return
	}
	writeJSON(w, http.StatusOK, viewOf(sim))
}

// simulateField words Simulate's error after the body's field: demand.NAME for demand[NAME].
func simulateField(err error) string {
	inv, ok := errors.AsType[*sluice.InvalidError](err)
	if !ok {
		return err.Error()
	}
	field := inv.Field
	if name, ok := strings.CutPrefix(field, "demand["); ok {
		field = "demand." + strings.TrimSuffix(name, "]")
	} else if strings.HasPrefix(field, "regions") {
		field = "demand"
	}
	return field + ": " + inv.Reason
}

// decodeSimulate reads {"limit": N, "demand": {"REGION": N, ...}, "floor": F} strictly: one
// object, each member once and spelled exactly, nothing after it. It walks the tokens, since
// the order of demand's members is the order demand moves in.
func decodeSimulate(data []byte) (simulateRequest, error) {
	req := simulateRequest{floor: region.DefaultFloor}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := openObject(dec, "the body"); err != nil {
		return req, err
	}
	seen := map[string]bool{}
	for dec.More() {
		name, err := memberName(dec)
		if err != nil {
			return req, err
		}
		if seen[name] {
			return req, invalidf("%s: given twice", name)
		}
		seen[name] = true
		switch name {
		case "limit":
			req.limit, err = wholeNumber(dec, "limit", 1)
		case "demand":
			req.regions, req.demand, err = decodeDemand(dec)
		case "floor":
			req.floor, err = decodeFloor(dec)
		default:
			return req, invalidf("unknown field %.80q; want limit, demand or floor", name)
		}
		if err != nil {
			return req, err
		}
	}
	if err := closeObject(dec); err != nil {
		return req, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, invalidf("the body holds more than one JSON object")
	}
	switch {
	case !seen["limit"]:
		return req, invalidf("limit: is required")
	case !seen["demand"]:
		return req, invalidf("demand: is required, e.g. {\"mumbai\": 600, \"frankfurt\": 200}")
	}
	return req, nil
}

// decodeDemand reads demand's object: regions in the order given, each a whole number.
func decodeDemand(dec *json.Decoder) ([]string, map[string]int64, error) {
	if err := openObject(dec, "demand"); err != nil {
		return nil, nil, err
	}
	var regions []string
	demand := map[string]int64{}
	var total int64
	for dec.More() {
		name, err := memberName(dec)
		if err != nil {
			return nil, nil, err
		}
		if err := regionsim.CheckRegionName(name); err != nil {
			return nil, nil, invalidf("demand: %v", err)
		}
		field := "demand." + name
		if _, dup := demand[name]; dup {
			return nil, nil, invalidf("%s: given twice", field)
		}
		if len(regions) == regionsim.MaxRegions {
			return nil, nil, invalidf("demand: at most %d regions", regionsim.MaxRegions)
		}
		n, err := wholeNumber(dec, field, 0)
		if err != nil {
			return nil, nil, err
		}
		if total += n; total > maxSimulated {
			return nil, nil, invalidf("demand: the total must be at most 2^53")
		}
		regions = append(regions, name)
		demand[name] = n
	}
	if err := closeObject(dec); err != nil {
		return nil, nil, err
	}
	if len(regions) == 0 {
		return nil, nil, invalidf("demand: no regions; want at least one, e.g. {\"mumbai\": 600}")
	}
	return regions, demand, nil
}

// wholeNumber reads an integer from lo to 2^53, written as one: 900, not 900.0 or 9e2.
func wholeNumber(dec *json.Decoder, field string, lo int64) (int64, error) {
	tok, err := dec.Token()
	if err != nil {
		return 0, syntaxError(err)
	}
	num, ok := tok.(json.Number)
	if !ok {
		return 0, invalidf("%s: must be a whole number from %d to 2^53", field, lo)
	}
	n, err := strconv.ParseInt(string(num), 10, 64)
	if err != nil || n < lo || n > maxSimulated {
		return 0, invalidf("%s: must be a whole number from %d to 2^53, got %.40s", field, lo, num)
	}
	return n, nil
}

func decodeFloor(dec *json.Decoder) (float64, error) {
	tok, err := dec.Token()
	if err != nil {
		return 0, syntaxError(err)
	}
	num, ok := tok.(json.Number)
	if !ok {
		return 0, invalidf("floor: must be a number at least 0 and below 1")
	}
	f, err := num.Float64()
	if err != nil || !(f >= 0 && f < 1) {
		return 0, invalidf("floor: must be at least 0 and below 1, got %.40s", num)
	}
	return f, nil
}

// openObject reads the '{' that starts what (the body, demand).
func openObject(dec *json.Decoder, what string) error {
	tok, err := dec.Token()
	if err == io.EOF && what == "the body" {
		return invalidf("the body is empty; want a JSON object")
	}
	if err != nil {
		return syntaxError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		if what == "the body" {
			return invalidf("the body must be a JSON object")
		}
		return invalidf("%s: must be an object of REGION: N", what)
	}
	return nil
}

// closeObject reads the '}' that ends an object, once dec.More is false.
func closeObject(dec *json.Decoder) error {
	if _, err := dec.Token(); err != nil {
		return syntaxError(err)
	}
	return nil
}

// memberName reads an object member's name; the decoder allows no other token there.
func memberName(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", syntaxError(err)
	}
	name, _ := tok.(string)
	return name, nil
}

func syntaxError(err error) error {
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		return invalidf("the body ends in the middle of its JSON")
	}
	return invalidf("the body is not valid JSON")
}

// viewOf lays the simulation out as the answer's columns.
func viewOf(sim *regionsim.Simulation) simulationView {
	n := len(sim.Minutes)
	v := simulationView{Limit: sim.Limit, Floor: sim.Floor, Every: sim.Every, Minutes: n,
		Regions: make([]regionView, len(sim.Regions)),
		Fleet: fleetView{Demand: make([]int64, n), Servable: make([]int64, n),
			ServedEven: make([]int64, n), ServedRebalanced: make([]int64, n)}}
	totals := sim.RegionTotals()
	for i, name := range sim.Regions {
		rv := regionView{Name: name, Demand: make([]int64, n), Even: make([]int64, n), Rebalanced: make([]int64, n),
			ServedEven: make([]int64, n), ServedRebalanced: make([]int64, n)}
		for m, minute := range sim.Minutes {
			d, even, reb := minute.Demand[name], minute.Even[name], minute.Rebalanced[name]
			rv.Demand[m], rv.Even[m], rv.Rebalanced[m] = d, even, reb
			rv.ServedEven[m], rv.ServedRebalanced[m] = min(d, even), min(d, reb)
			v.Fleet.Demand[m] += d
		}
		t := totals[i]
		rv.Total = regionTotalView{t.Demand, t.EvenShare, t.RebalancedShare, t.ServedEven, t.ServedRebalanced}
		v.Regions[i] = rv
	}
	for m, minute := range sim.Minutes {
		v.Fleet.Servable[m] = min(v.Fleet.Demand[m], sim.Limit)
		v.Fleet.ServedEven[m], v.Fleet.ServedRebalanced[m] = minute.ServedEven, minute.ServedRebalanced
	}
	t := sim.Totals()
	v.Totals = fleetTotalView{t.Demand, t.Servable, t.Even, t.Rebalanced}
	return v
}
