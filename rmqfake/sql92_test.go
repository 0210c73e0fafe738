package rmqfake

import (
	"math"
	"strings"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

func mapProps(m map[string]string) sqlProps {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok && v != ""
	}
}

// sqlOutcome is what the broker does with an expression on a message.
type sqlOutcome int

const (
	sqlNoMatch sqlOutcome = iota
	sqlMatch
	sqlBad // does not compile
)

func sqlRun(expr string, props map[string]string) sqlOutcome {
	e, err := compileSQL92(expr)
	if err != nil {
		return sqlBad
	}
	if e.matches(mapProps(props)) {
		return sqlMatch
	}
	return sqlNoMatch
}

// TestSQL92Examples: the examples of the research note
// (notes/research/sql92-transactions-recall-offsets.md §1.5) on a message
// with user properties {a:"3", b:"x"}.
func TestSQL92Examples(t *testing.T) {
	props := map[string]string{"a": "3", "b": "x"}
	for _, c := range []struct {
		expr string
		want sqlOutcome
	}{
		{"a = 3", sqlMatch},
		{"a = '3'", sqlMatch},
		{"a = 3.0", sqlMatch},
		{"a = '03'", sqlNoMatch},
		{"a > 2", sqlMatch}, {"a >= 3", sqlMatch}, {"a < 4.5", sqlMatch},
		{"a BETWEEN 1 AND 5", sqlMatch},
		{"a NOT BETWEEN 1 AND 2", sqlMatch},
		{"a IN ('1', '3')", sqlMatch},
		{"a NOT IN ('3')", sqlNoMatch},
		{"a = '3' AND b = 'x'", sqlMatch}, {"a = '3' and b = 'x'", sqlMatch},
		{"A = '3'", sqlNoMatch},
		{"b = 3", sqlNoMatch},
		{"b = 3 OR a = '3'", sqlNoMatch},
		{"a = '3' OR b = 3", sqlMatch},
		{"b > 1", sqlNoMatch}, {"a > b", sqlNoMatch},
		{"c = 'x'", sqlNoMatch}, {"c <> 'x'", sqlNoMatch}, {"NOT (c = 'x')", sqlNoMatch},
		{"c IS NULL", sqlMatch}, {"a IS NOT NULL", sqlMatch}, {"b IS NULL", sqlNoMatch},
		{"c = 'x' OR a = '3'", sqlMatch},
		{"b CONTAINS 'x'", sqlMatch}, {"b STARTSWITH 'y'", sqlNoMatch}, {"b NOT ENDSWITH 'y'", sqlMatch},
		{"c NOT CONTAINS 'x'", sqlNoMatch}, {"b CONTAINS ''", sqlNoMatch},
		{"TRUE", sqlMatch}, {"FALSE", sqlNoMatch}, {"a", sqlNoMatch},
		{"a = TRUE", sqlNoMatch},
		{"NOT a = '3'", sqlNoMatch},
		{"a > -1", sqlMatch}, {"a = -3", sqlNoMatch},
		{"a = 03", sqlNoMatch}, {"a = '3' xyz", sqlMatch},
		{"a = NULL", sqlBad}, {"a > '2'", sqlBad}, {"a IN (3)", sqlBad}, {"a BETWEEN 5 AND 1", sqlBad},
		{"a > 0.0", sqlBad}, {"3", sqlBad}, {`a = "3"`, sqlBad}, {"a != '3'", sqlBad}, {"a == '3'", sqlBad},
		{"", sqlBad},
	} {
		if got := sqlRun(c.expr, props); got != c.want {
			t.Errorf("%q on {a:3, b:x}: %v, want %v", c.expr, got, c.want)
		}
	}
}

// TestSQL92Compile: which expressions the 5.5.0 broker compiles, as it
// answered them (scenario q's probes: each inside "qn = 'never' AND (...)",
// or appended to "qn = 'never' AND " when it starts with "!", so that what
// follows a complete expression is tested as trailing input).
func TestSQL92Compile(t *testing.T) {
	ok := []string{
		"1 = TRUE", "a > -'x'", "a > 4.9e-324", "a = 9223372036854775807", "a = 9223372036854775807L",
		"a BETWEEN 2 AND 2", "!a = 1 -- x", "!a = 1 x #", "!a = 1 )", "!a = 1 'x'", "!a = 1 1",
		"!a = 1 TRUE", "!a = 1 (", "!a = 1 ,", "!a = 1 +", "!a = 1 ''", "a in ('x')", "$a_1 IS NULL",
		"_ IS NULL", "5 CONTAINS 'x'", "TRUE CONTAINS 'x'", "(a)", "NOT (a)", "+a > 1", "- - 3 > 1",
		"a > 0", "a > 1.", "a > .5", "a > 1.e2", "a = 1 = 2", "a IS NULL = TRUE", "'x' = FALSE",
		"a NOT CONTAINS 'x'", "a NOT STARTSWITH 'x'", "a NOT IN ('x')", "a NOT BETWEEN 1 AND 2",
		"NOT NOT a", "a = 1 OR NOT a", "a <>1", "a=1", "a=-1", "a = 1.5e+3", "a = 1.5E-3", "a = 1l",
		"NULL", "TRUE AND NULL", "a = NOT TRUE", "a IS NOT NULL IS NOT NULL", "a CONTAINS ''",
		"A IN ('x') AND a IS NULL", "a BETWEEN -5 AND -10", "a = 3 -- c\n", "a /* c */ = 3",
		"a NOT BETWEEN 5 AND 1",
		strings.Repeat("(", 300) + "a = 1" + strings.Repeat(")", 300),
		"!" + strings.Repeat("a IS NULL AND ", 10000) + "a IS NULL",
		strings.Repeat("NOT ", 1000) + "a",
	}
	bad := []string{
		"a NOT x", "a IS x", "TRUE = 1", "NOT 3", "-a", "a > TRUE", "a > 1e400", "a > 1e-400", "a > 2e-324",
		"a = 9223372036854775808", "a BETWEEN 2.5 AND 2", "'x' IN ('x')", "a IN ()", "a IN ('x',)", "a = 'x",
		"!a = 1 /* x", "!a = 1 #", "!a = 1 NOT x", "!a = 1 IS x", "!a = 1 AND", "!a = 1 OR", "!a = 1 =",
		"!a = 1 >", "!a = 1 NOT", "!a = 1 IN", "!a = 1 CONTAINS", "!a = 1 BETWEEN", "!a = 1 .", "!a = 1 \"",
		"!a = 1 !", "!a = 1 '", "!a = 1 /", "!a = 1 *", "a = 'x' 'y'", "a == 1", "a CONTAINS b",
		"NULL = NULL", "NULL IN ('x')", "a <> NULL", "'x'", "3", "a AND 3", "a > .0", "a > 0e5",
		"a BETWEEN 1 AND 'x'", "a BETWEEN NULL AND 1", "a > 3 BETWEEN 1 AND 2", "FALSE = 'x'",
		"a NOT LIKE 'x'", "a NOT NOT IN ('x')", "a < = 1", "a > = 1", "a < > 1", "a = 1.5e", "a = 0x10",
		"a = 1d", "a = 1f", "a = 0l", "a = 0L", "a IS NULL NOT IN ('x')", "in IS NULL", "a.b IS NULL",
		"a-b IS NULL", "a = 00003",
		strings.Repeat("(", 1000) + "a = 1" + strings.Repeat(")", 1000),
		strings.Repeat("NOT ", 10000) + "a",
	}
	wrap := func(x string) string {
		if strings.HasPrefix(x, "!") {
			return "qn = 'never' AND " + x[1:]
		}
		return "qn = 'never' AND (" + x + ")"
	}
	for _, x := range ok {
		if _, err := compileSQL92(wrap(x)); err != nil {
			t.Errorf("%.60q: %v, want it compiled", x, err)
		}
	}
	for _, x := range bad {
		if _, err := compileSQL92(wrap(x)); err == nil {
			t.Errorf("%.60q compiled; the broker refuses it", x)
		}
	}
}

// TestSQL92Evaluation: the broker's type rules beyond the examples.
func TestSQL92Evaluation(t *testing.T) {
	props := map[string]string{"a": "3", "f": "2.5", "n": "NaN", "t": "TRUE", "big": "3000000000",
		"sp": " 4 ", "d": "", "neg": "-7", "u": "٣"}
	for _, c := range []struct {
		expr string
		want sqlOutcome
	}{
		{"d IS NULL", sqlMatch},             // an empty value is no value
		{"'x' <> c", sqlMatch},              // NOT ('x' = c): a missing right side is FALSE
		{"'x' = c", sqlNoMatch},             //
		{"f = 2.5", sqlMatch},               // Double.valueOf
		{"f > 2", sqlNoMatch},               // Integer.valueOf("2.5") throws
		{"f > 2.0", sqlMatch},               //
		{"n > 1.0", sqlMatch},               // Double.compare: NaN is above everything
		{"n = 1.0", sqlNoMatch},             //
		{"t = TRUE", sqlMatch},              // Boolean.valueOf ignores case
		{"TRUE = t", sqlNoMatch},            // a Boolean on the left cannot take a String
		{"big > 2147483647", sqlNoMatch},    // Integer.valueOf overflows
		{"big > 2147483648", sqlMatch},      // a Long literal: Long.valueOf
		{"sp = 4", sqlNoMatch},              // Integer.valueOf does not trim
		{"sp = 4.0", sqlMatch},              // Double.valueOf does
		{"sp > neg", sqlMatch},              // two strings: both Double.valueOf
		{"neg < -6", sqlMatch},              //
		{"-a = -3", sqlNoMatch},             // minus on a string is null
		{"u = 3", sqlMatch},                 // Character.digit takes Arabic-Indic digits
		{"u = 3.0", sqlNoMatch},             // Double.valueOf does not
		{"a = 3L", sqlMatch},                //
		{"(a = 3) = (f = 2.5)", sqlMatch},   //
		{"c IN ('x') OR TRUE", sqlMatch},    //
		{"c IN ('x') AND TRUE", sqlNoMatch}, //
		{"c NOT IN ('x')", sqlNoMatch},      //
		{"a BETWEEN -5 AND -10", sqlNoMatch},
		{"a NOT BETWEEN 5 AND 1", sqlMatch},
		{"x CONTAINS 'a' OR a = 3", sqlMatch},
		{"a = 'x' OR a = 3", sqlMatch},
		{"a = 3 AND f = 2", sqlNoMatch}, // throws
		{"a = 4 AND f = 2", sqlNoMatch}, // FALSE stops the AND
		{"c > 1 AND f = 2", sqlNoMatch}, // unknown AND error = error
	} {
		if got := sqlRun(c.expr, props); got != c.want {
			t.Errorf("%q: %v, want %v", c.expr, got, c.want)
		}
	}
	// Very deep evaluation is dropped, like the broker's StackOverflowError.
	deep := strings.Repeat("a IS NOT NULL AND ", 20000) + "a IS NOT NULL"
	if got := sqlRun(deep, props); got != sqlNoMatch {
		t.Errorf("20001-term AND chain: %v, want no match", got)
	}
}

func TestJavaNumberParsing(t *testing.T) {
	for s, want := range map[string]float64{
		"1": 1, " 1.5 ": 1.5, "1.": 1, ".5": 0.5, "1e3": 1000, "-2.5E-1": -0.25, "1f": 1, "2D": 2,
		"Infinity": math.Inf(1), "-Infinity": math.Inf(-1), "0x1p3": 8, "0X1.8P1": 3, "+0x.8p1d": 1,
	} {
		if got, ok := sqlParseDouble(s); !ok || got != want {
			t.Errorf("Double.valueOf(%q) = %v %v, want %v", s, got, ok, want)
		}
	}
	if f, ok := sqlParseDouble("NaN"); !ok || !math.IsNaN(f) {
		t.Errorf("Double.valueOf(NaN) = %v %v", f, ok)
	}
	for _, s := range []string{"", " ", ".", "e1", "1e", "nan", "inf", "infinity", "0x1", "0x1.8", "1_0", "1ff", "--1", "1 2", "٣", "0x", "0xp1"} {
		if f, ok := sqlParseDouble(s); ok {
			t.Errorf("Double.valueOf(%q) = %v, want NumberFormatException", s, f)
		}
	}
	for s, want := range map[string]int64{"0": 0, "-2147483648": math.MinInt32, "+7": 7, "2147483647": math.MaxInt32, "٣٤": 34, "０１": 1} {
		if v, ok := sqlParseInteger(s, sqlInt); !ok || v.n != want {
			t.Errorf("Integer.valueOf(%q) = %v %v, want %d", s, v.n, ok, want)
		}
	}
	for _, s := range []string{"", "-", "+", "2147483648", "-2147483649", " 1", "1 ", "1.0", "0x1", "𝟙"} {
		if v, ok := sqlParseInteger(s, sqlInt); ok {
			t.Errorf("Integer.valueOf(%q) = %d, want NumberFormatException", s, v.n)
		}
	}
	if v, ok := sqlParseInteger("-9223372036854775808", sqlLong); !ok || v.n != math.MinInt64 {
		t.Errorf("Long.valueOf(MinInt64) = %d %v", v.n, ok)
	}
	if _, ok := sqlParseInteger("9223372036854775808", sqlLong); ok {
		t.Errorf("Long.valueOf(2^63) accepted")
	}
}

// TestSQL92MessageProperties: a filter sees user properties and the system
// properties the 5.5.0 broker stores for a message sent over gRPC
// (scenario q), not empty ones.
func TestSQL92MessageProperties(t *testing.T) {
	tp := &topic{key: resKey{name: "T"}}
	m := &message{id: "ID1", store: tp, bornHost: "10.0.0.1:5", bornSec: 1700000000, bornNanos: 5e6,
		props: map[string]string{"a": "1", "e": ""}, x: &msgExtra{keys: []string{"k1", "k2"}, tag: "tg"}}
	props := sqlMessageProps(m)
	for name, want := range map[string]string{
		"a": "1", "TAGS": "tg", "KEYS": "k1 k2", "UNIQ_KEY": "ID1", "PGROUP": "T", "BORN_TIMESTAMP": "1700000000005",
		"__BORNHOST": "10.0.0.1:5", "RECONSUME_TIME": "0", "CLUSTER": "DefaultCluster", "MSG_REGION": "DefaultRegion",
		"TRACE_ON": "true",
	} {
		if got, ok := props(name); !ok || got != want {
			t.Errorf("%s = %q %v, want %q", name, got, ok, want)
		}
	}
	for _, name := range []string{"e", "zz", "__SHARDINGKEY", "TIMER_DELIVER_MS", "TRACE_CONTEXT", "WAIT"} {
		if got, ok := props(name); ok {
			t.Errorf("%s = %q, want no such property", name, got)
		}
	}
	m.x.deliverAt = time.UnixMilli(1700000001234)
	m.x.msgGroup = "g"
	if got, _ := props("TIMER_DELIVER_MS"); got != "1700000001234" {
		t.Errorf("TIMER_DELIVER_MS = %q", got)
	}
	if got, _ := props("__SHARDINGKEY"); got != "g" {
		t.Errorf("__SHARDINGKEY = %q", got)
	}
}

// TestParseFilterSQL: the answers of a receive with an SQL92 filter, and
// lite messages passing any SQL92 filter.
func TestParseFilterSQL(t *testing.T) {
	sql := func(x string) *v2.FilterExpression {
		return &v2.FilterExpression{Type: v2.FilterType_SQL, Expression: x}
	}
	if _, f := parseFilter(sql("")); f == nil || f.code != v2.Code_ILLEGAL_FILTER_EXPRESSION || f.msg != "Expression can't be null! SQL92" {
		t.Errorf("empty SQL92: %+v", f)
	}
	if _, f := parseFilter(sql("a = NULL")); f == nil || f.code != v2.Code_INTERNAL_SERVER_ERROR || f.msg != "parse the consumer's subscription failed" {
		t.Errorf("SQL92 that does not compile: %+v", f)
	}
	flt, f := parseFilter(sql("a = 1"))
	if f != nil {
		t.Fatal(f)
	}
	normal := &message{props: map[string]string{"a": "2"}}
	lite := &message{props: map[string]string{"a": "2"}, main: &topic{typ: TopicLite}}
	fifoWithLite := &message{props: map[string]string{"a": "2"}, lite: "l", main: &topic{typ: TopicFIFO}}
	if flt.match(fifoWithLite) {
		t.Errorf("a = 1 matched a=2 on a FIFO message that carries a lite topic: SQL92 applies there")
	}
	if flt.match(normal) || !flt.match(lite) {
		t.Errorf("a = 1 on a=2: normal %v (want false), lite %v (want true)", flt.match(normal), flt.match(lite))
	}
	normal.props["a"] = "1"
	if !flt.match(normal) {
		t.Errorf("a = 1 on a=1: no match")
	}
}
