"""The TLC yellow-trip columns, written out independently of the product's declarations and fixtures:
what the tests compare the generated files and the loads with."""

import pyarrow as pa

# Amounts in dollars: doubles in every year's files and in the raw table.
AMOUNT_COLUMNS = [
    "fare_amount",
    "extra",
    "mta_tax",
    "tip_amount",
    "tolls_amount",
    "improvement_surcharge",
    "total_amount",
    "congestion_surcharge",
]

# A 2024 file's columns, in the published order.
COLUMNS_2024 = [
    "VendorID",
    "tpep_pickup_datetime",
    "tpep_dropoff_datetime",
    "passenger_count",
    "trip_distance",
    "RatecodeID",
    "store_and_fwd_flag",
    "PULocationID",
    "DOLocationID",
    "payment_type",
    *AMOUNT_COLUMNS,
    "Airport_fee",
]

# The TLC -> target column contract (TLC names matched case-insensitively): raw's name and type.
TLC_TO_TARGET = {
    "vendorid": ("vendor_id", pa.int32()),
    "tpep_pickup_datetime": ("pickup_datetime", pa.timestamp("us")),
    "tpep_dropoff_datetime": ("dropoff_datetime", pa.timestamp("us")),
    "passenger_count": ("passenger_count", pa.int64()),
    "trip_distance": ("trip_distance", pa.float64()),
    "ratecodeid": ("ratecode_id", pa.int64()),
    "store_and_fwd_flag": ("store_and_fwd_flag", pa.string()),
    "pulocationid": ("pickup_location_id", pa.int32()),
    "dolocationid": ("dropoff_location_id", pa.int32()),
    "payment_type": ("payment_type", pa.int64()),
    **{c: (c, pa.float64()) for c in (*AMOUNT_COLUMNS, "airport_fee", "cbd_congestion_fee")},
}
