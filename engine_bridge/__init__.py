"""spectally.engine_bridge"""
