"""pykraft: Apache Kafka in KRaft mode, written in Python."""

__version__ = "0.1.0"
