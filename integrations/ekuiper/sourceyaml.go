package rmqkuiper

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"

	"gopkg.in/yaml.v3"
)

// DefaultSourceYAML is etc/sources/rocketmq.yaml as rmqflow-sql writes it on
// first start: the "default" section every rocketmq stream starts from
// (CONF_KEY names another section to overlay it), with each key and its
// default.
const DefaultSourceYAML = `# The rocketmq source's configurations: a stream takes "default", overlaid
# by the section its CONF_KEY names; its DATASOURCE is the topic (the LITE
# main topic in lite mode). Durations: "30s" or milliseconds.
default:
  endpoints: 127.0.0.1:8081
  # namespace: ""
  # access-key: ""
  # or the access key from the server's environment: the variable's name
  # access-key-env: ""
  # the secret key, from the server's environment: the name of the variable
  # holding it (a plain secret-key is refused: eKuiper logs this section)
  # secret-key-env: ""
  # tls-enabled: false
  # ca-file: ""
  # request-timeout: 3s
  # lite (a LITE main topic through a lite group) or simple (a normal topic)
  mode: lite
  consumer-group: agents-g
  # lite-topics: [a, b]       exact lite subscription (lite mode)
  # filter-type: tag          tag or sql (simple mode)
  # filter-expression: "*"
  # fetch-concurrency: 1
  # await-duration: 20s
  # invisible-duration: 60s
  # max-message-num: 32
  # renewal-ahead-time: 5s
  # sink (acks follow the rule's rocketmq/rocketmq_ack sinks), ingest (at
  # most once) or external (the handle in meta(rocketmq_handle); acked elsewhere)
  ack-mode: sink
  # how long a row may wait for its rule's sinks before its message comes back
  # pending-max-age: 1h
  # after this long without ingesting, ack the rows the rule's metrics show it
  # dropped (rules without windows); 0 turns it off
  # idle-ack: 2s
  # a message whose rows keep failing in the rule's sinks is given up on at
  # this many deliveries of its own (lowered to the group's retry limit + 1,
  # halved for a lite topic or FIFO group)
  # max-delivery-attempt: 16
  # where it then goes: dead-letter-queue (%DLQ%<group> on the broker) or
  # ack (acked: dropped)
  # on-valve: dead-letter-queue
  # a NORMAL topic of your own to park it in instead (acked once stored;
  # ack-mode sink, not with on-valve ack; after 3 failed parks of one
  # message, where on-valve says)
  # dead-letter-topic: ""
  # throttle: false           defer lite topics over their fair share
  # throttle-window: 10s
  # throttle-slack: 1.5
  # throttle-min-count: 10
  # throttle-defer: 10s
`

// CheckSourceFile refuses an etc/sources/rocketmq.yaml (or .json) in which
// a section holds a plain secret-key: eKuiper logs a stream's section at
// info level each time a rule's source starts, before the source sees it.
// rmqflow-sql calls it before it starts eKuiper; a missing file is fine.
// The error does not hold the secret.
func CheckSourceFile(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	var sections map[string]map[string]any
	if err := yaml.Unmarshal(b, &sections); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	names := make([]string, 0, len(sections))
	for name := range sections {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := plainSecret(sections[name]); err != nil {
			return fmt.Errorf("%s: section %s: %w", path, name, err)
		}
	}
	return nil
}
