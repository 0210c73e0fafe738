package rmqfake

// MaxQueues is the most queues a topic may have (CreateTopic's Queues, a
// fixture's queues=N). The real broker's topics have a few (8 by default,
// 4 in the project's fixtures); every queue costs rmqfake a position per
// consuming group and QueryRoute one MessageQueue per queue, so an
// unbounded count let one fixture line make a single route answer of
// gigabytes. 1024 queues keep a route answer near 100 KB, well inside the
// clients' 4 MiB default receive size.
const MaxQueues = 1024
