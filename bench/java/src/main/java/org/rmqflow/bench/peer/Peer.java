package org.rmqflow.bench.peer;

/** One way of consuming the run's messages with the official client. */
interface Peer {
    /** Starts the consumer; it records into the tracker from then on. */
    void start() throws Exception;

    /** Stops the consumer and says goodbye to the broker. */
    void close() throws Exception;
}
